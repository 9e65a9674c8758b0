"""`assocmem bench models` (also `assocmem bench train --device cuda`): training tokens/s and peak memory of
preset language models against a transformers Llama of the same width, depth and MLP, in one run.

Default: ``thesis-150m-gdn-75`` (d_model 768, 12 layers, Gated DeltaNet with attention at layers 3, 7 and
11: GDN:attention 3:1, untied head, vocab 32000) and its Llama (same d_model, depth, heads, SwiGLU width,
vocabulary and tying; SDPA attention), B=8, T ∈ {2048, 8192}, under bf16 autocast, AdamW. Each step is
what ``assocmem train`` does: forward under autocast, loss.backward(), AdamW step, gradients zeroed;
the tokens are random ids (throughput does not depend on them).

Per (model, T):

1. the first step, timed on its own (``first_step_s``: torch.compile and Triton autotuning land there);
2. ``warmup`` − 1 more untimed steps, then ``steps`` timed ones (CUDA events on a GPU, the host clock
   elsewhere): ``tokens_per_s`` = B·T / the median step;
3. ``peak_gib``: torch.cuda.max_memory_allocated from the model's construction to the last step
   (weights, AdamW's moments, activations); None off CUDA;
4. ``vs_llama``: tokens/s over the Llama's at the same T, same run.

The recurrent layers run ``backend`` (mixers/kernels.py; default auto: FLA's kernels where FLA takes the
call on CUDA, else the compiled forms); ``kernels`` lists what each distinct layer ran. Each (model, T)
has ``case_budget_s`` seconds and the bench ``budget_s`` (budget.py): a case cut off reads ``skipped:
budget``, one that raises (out of memory included) ``error: ...``. Timings are ratios within one run;
nothing here is asserted in tests.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from assocmem.mixers.layer import check_backend, set_backend
from assocmem.models import HybridConfig, build_model
from assocmem.models.presets import get_model_preset

from .backends import budget_cut, settle, timed_ms
from .budget import Budget

DEFAULT_PRESETS = ("thesis-150m-gdn-75",)
LLAMA = "llama"


def llama_like(hc: HybridConfig, max_positions: int) -> torch.nn.Module:
    """A transformers Llama with ``hc``'s width, depth, attention heads, SwiGLU width, vocabulary and tying."""
    from transformers import LlamaConfig, LlamaForCausalLM

    attn = next((s for s in hc.mixer_specs() if s.memory.kind == "nonparametric"), None)
    heads = attn.layer.num_heads if attn is not None else hc.num_heads or hc.d_model // 64
    kv = (attn.layer.attention.num_kv_heads or heads) if attn is not None else heads
    theta = attn.layer.attention.rope_theta if attn is not None else 1e4
    cfg = LlamaConfig(vocab_size=hc.vocab_size, hidden_size=hc.d_model, intermediate_size=hc.mlp_width,
                      num_hidden_layers=hc.depth, num_attention_heads=heads, num_key_value_heads=kv,
                      head_dim=hc.d_model // heads, max_position_embeddings=max_positions, rms_norm_eps=hc.norm_eps,
                      rope_parameters={"rope_type": "default", "rope_theta": theta},
                      tie_word_embeddings=hc.tie_embeddings, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


def build(name: str, T: int, backend: str | None) -> tuple[torch.nn.Module, HybridConfig]:
    """The model called ``name`` (a model preset, or LLAMA + ":" + preset for its Llama)."""
    if name.startswith(f"{LLAMA}:"):
        hc = get_model_preset(name.split(":", 1)[1])
        return llama_like(hc, T), hc
    hc = get_model_preset(name)
    model = build_model(hc)
    if backend is not None:
        set_backend(model, backend)
    return model, hc


def kernels_of(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> list[str]:
    """What the model's recurrent layers run on ``device`` for ``dtype``: distinct 'form [backend]' strings."""
    return sorted({f"{form.name} [{form.backend}]" for _, form in check_backend(model, device, dtype)})


def trainer(model: torch.nn.Module, ids: torch.Tensor, precision: str) -> Callable[[], torch.Tensor]:
    """One training step of ``model`` on ``ids`` (labels = ids) as ``assocmem train`` takes it; returns the loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    device = ids.device

    def step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def measure(name: str, T: int, *, batch: int, device: torch.device, precision: str, backend: str | None,
            warmup: int, steps: int, budget: Budget) -> dict:
    """The row of one model at one T (module docstring)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    with device:  # parameters made where they train (a 370M model's CPU init takes seconds)
        model, hc = build(name, T, backend)
    model = model.to(device).train()
    row = {"params_m": sum(p.numel() for p in model.parameters()) / 1e6, "kernels": None}
    if not name.startswith(f"{LLAMA}:"):
        row["kernels"] = kernels_of(model, device, torch.bfloat16 if precision == "bf16" else torch.float32)
    ids = torch.randint(0, hc.vocab_size, (batch, T), generator=torch.Generator().manual_seed(0)).to(device)
    step = trainer(model, ids, precision)
    t0 = time.perf_counter()
    loss = step()
    settle(device)
    row["first_step_s"], row["loss"] = time.perf_counter() - t0, float(loss)
    for _ in range(max(warmup - 1, 0)):
        budget.check()
        step()
    times = []
    for _ in range(steps):
        budget.check()
        times.append(timed_ms(step, device))
    median = statistics.median(times) / 1e3
    row.update(step_s=median, tokens_per_s=batch * T / median,
               peak_gib=torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None)
    return row


def run_models(presets=DEFAULT_PRESETS, Ts=(2048, 8192), *, batch: int = 8, device: str = "cuda",
               precision: str = "bf16", backend: str | None = None, llama: bool = True, warmup: int = 2,
               steps: int = 5, budget_s: float = 200.0, case_budget_s: float = 90.0, log=print,
               on_row=None) -> list[dict]:
    """Rows of every preset (then its Llama) at every T; ``on_row(rows)`` after each (module docstring)."""
    device = torch.device(device)
    names = [n for p in presets for n in ([p, f"{LLAMA}:{p}"] if llama else [p])]
    rows: list[dict] = []
    with Budget(budget_s) as budget:
        for T in Ts:
            for name in names:
                row = {"model": name, "T": T, "batch": batch, "precision": precision, "status": "ok"}
                try:
                    with budget.case(case_budget_s):
                        row.update(measure(name, T, batch=batch, device=device, precision=precision, backend=backend,
                                           warmup=warmup, steps=steps, budget=budget))
                except torch.cuda.OutOfMemoryError:
                    row["status"] = "error: out of memory"
                except Exception as err:  # noqa: BLE001  (a model that fails is a row that says why)
                    cut = budget_cut(err)
                    first = str(err).splitlines()[0] if str(err) else ""
                    row["status"] = f"skipped: budget ({cut})" if cut else f"error: {type(err).__name__}: {first}"
                settle(device)
                rows.append(row)
                add_ratios(rows)
                log(format_row(row))
                if on_row is not None:
                    on_row(rows)
    return rows


def add_ratios(rows: list[dict]) -> None:
    """``vs_llama``: tokens/s over the same preset's Llama at the same T (None where either is missing)."""
    llama = {(r["model"].split(":", 1)[1], r["T"]): r.get("tokens_per_s") for r in rows
             if r["model"].startswith(f"{LLAMA}:")}
    for r in rows:
        base = llama.get((r["model"], r["T"]))
        r["vs_llama"] = r.get("tokens_per_s") / base if r.get("tokens_per_s") and base else None


def format_row(r: dict) -> str:
    if r.get("tokens_per_s") is None:
        return f"  {r['model']:32s} T={r['T']:6d}  [{r['status']}]"
    peak = f"{r['peak_gib']:6.1f} GiB" if r["peak_gib"] is not None else "   n/a    "
    ratio = f"  {r['vs_llama']:5.2f}x llama" if r.get("vs_llama") else ""
    return (f"  {r['model']:32s} T={r['T']:6d} {r['params_m']:7.1f}M {r['tokens_per_s']:12,.0f} tokens/s  peak {peak}"
            f"  first step {r['first_step_s']:6.1f} s{ratio}  " + ", ".join(r["kernels"] or []))


def markdown_table(rows: list[dict]) -> str:
    lines = ["| model | T | params | tokens/s | vs Llama | peak memory | first step | kernels |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("tokens_per_s") is None:
            lines.append(f"| {r['model']} | {r['T']} | | {r['status']} | | | | |")
            continue
        peak = f"{r['peak_gib']:.1f} GiB" if r["peak_gib"] is not None else "n/a"
        ratio = f"{r['vs_llama']:.2f}" if r.get("vs_llama") else ""
        lines.append(f"| {r['model']} | {r['T']} | {r['params_m']:.1f}M | {r['tokens_per_s']:,.0f} | {ratio} | "
                     f"{peak} | {r['first_step_s']:.1f} s | {', '.join(r['kernels'] or [])} |")
    return "\n".join(lines)
