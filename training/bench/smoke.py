"""`assocmem bench smoke`: every preset model and hybrid trains one step under bf16 autocast on a device.

The configurations, in order:

    presets   every model preset (models/presets.py; ``tiny``: only the *-tiny ones)
    hybrids   HYBRIDS (the delta-family hybrids that must train under CUDA's autocast), then every mixer
              preset next to attention ("PRESET,attn"), at d_model ``width`` with heads of 64 (``tiny``:
              width 32, 2 heads)

Each trains one step as ``assocmem train`` does it (forward under ``torch.autocast(device, bf16)``,
backward, AdamW) on random ids, B=``batch``, T=``seq_len`` (shorter where a preset's learned positions
or spectral filters fix it), and prints one line: ok with the loss, the seconds and the kernels its
recurrent layers ran ('form [backend]', mixers/kernels.py), or the error. A step is ok when the loss
and every gradient are finite. Each configuration has ``case_budget_s`` seconds (budget.py); the
command exits 1 when any fails.
"""
from __future__ import annotations

import time
import warnings

import torch

from assocmem.mixers.layer import check_backend, set_backend
from assocmem.mixers.presets import list_presets
from assocmem.models import HybridConfig, build_model
from assocmem.models.presets import get_model_preset, list_model_presets

from .backends import budget_cut, settle
from .budget import Budget

HYBRIDS = ("gated_deltanet,attn", "par(gated_deltanet,attn)", "deltanet,linear_attention", "kda,attn",
           "rwkv7_dplr,attn")


def configurations(tiny: bool = False, width: int = 256, layers: tuple[str, ...] | None = None,
                   presets: tuple[str, ...] | None = None) -> dict[str, HybridConfig]:
    """name -> HybridConfig of every configuration the smoke trains (module docstring); ``presets`` and
    ``layers`` replace the default lists."""
    if presets is None:
        presets = tuple(p for p in list_model_presets() if not tiny or p.endswith("-tiny") or "-tiny-" in p)
    out = {p: get_model_preset(p) for p in presets}
    patterns = layers if layers is not None else HYBRIDS + tuple(f"{p},attn" for p in list_presets()
                                                                  if f"{p},attn" not in HYBRIDS)
    d, heads = (32, 2) if tiny else (width, max(width // 64, 1))
    for pattern in patterns:
        extra = {"overrides": {"sca": {"num_heads": heads}}} if "sca" in pattern else {}
        out[pattern] = HybridConfig(layers=pattern, d_model=d, vocab_size=256, num_heads=heads, mlp_ratio=2.0, **extra)
    return out


def sequence_length(hc: HybridConfig, seq_len: int) -> int:
    """``seq_len``, or the length a preset's spectral filters are built for, or at most its learned positions."""
    fixed = [e.seq_len for e in hc.extensions if getattr(e, "seq_len", None)]  # FOH / steering filters
    if fixed:
        return min(fixed)
    return min(seq_len, hc.max_positions) if hc.max_positions else seq_len


def train_step(hc: HybridConfig, *, device: torch.device, batch: int, seq_len: int, backend: str | None) -> dict:
    """One AdamW step of a fresh model of ``hc`` under bf16 autocast: loss, seconds and kernels."""
    torch.manual_seed(0)
    with device:  # parameters made where they train (a 370M model's CPU init takes seconds)
        model = build_model(hc)
    model = model.to(device).train()
    if backend is not None:
        set_backend(model, backend)
    kernels = sorted({f"{form.name} [{form.backend}]" for _, form in check_backend(model, device, torch.bfloat16)})
    T = sequence_length(hc, seq_len)
    ids = torch.randint(0, hc.vocab_size, (batch, T), generator=torch.Generator().manual_seed(0)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
    opt.step()
    settle(device)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {float(loss)}")
    if bad:
        raise FloatingPointError(f"non-finite gradients of {len(bad)} parameters, first {bad[0]}")
    return {"loss": float(loss), "seconds": time.perf_counter() - t0, "T": T, "kernels": kernels}


def run_smoke(configs: dict[str, HybridConfig], *, device: str = "cuda", batch: int = 2, seq_len: int = 256,
              backend: str | None = None, case_budget_s: float = 60.0, budget_s: float = 600.0, log=print,
              on_row=None) -> list[dict]:
    """One row per configuration: ``status`` ok / error: ... / skipped: budget, with the step's loss and kernels."""
    device = torch.device(device)
    rows: list[dict] = []
    with Budget(budget_s) as budget:
        for name, hc in configs.items():
            row = {"config": name, "status": "ok"}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with budget.case(case_budget_s):
                        row.update(train_step(hc, device=device, batch=batch, seq_len=seq_len, backend=backend))
                except Exception as err:  # noqa: BLE001  (every failure is a line of the report)
                    cut = budget_cut(err)
                    first = str(err).splitlines()[0] if str(err) else ""
                    row["status"] = f"skipped: budget ({cut})" if cut else f"error: {type(err).__name__}: {first}"
            row["warnings"] = sorted({str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)})
            settle(device)
            rows.append(row)
            log(format_row(row))
            if on_row is not None:
                on_row(rows)
    return rows


def format_row(r: dict) -> str:
    if r["status"] != "ok":
        return f"  {r['config']:40s} {r['status']}"
    return (f"  {r['config']:40s} ok  loss {r['loss']:7.4f}  T={r['T']}  {r['seconds']:6.2f} s  "
            + ", ".join(r["kernels"]))
