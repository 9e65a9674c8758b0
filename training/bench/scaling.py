"""`assocmem bench scaling`: per-token cost of the chunk forms from short to long sequences.

A chunk form does O(T) work, so its time per token should not grow with T. Per family
(B=1, H=1, K=V=64, float32 by default) and T (default 8192 … 65536), the forward+backward
(or forward) milliseconds of the ``chunk`` form (median of ``repeats`` calls after one warm-up),
the microseconds per token, their ratio to the shortest T, and the memory: the bytes autograd
saves for backward (fwd+bwd) and the peak resident-set growth of one call.

Timings are ratios within one run on a noisy machine; nothing here is asserted in tests.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from assocmem.mixers.lower import lower
from assocmem.mixers.presets import get_preset
from assocmem.mixers.verify import make_case

from .timing import measure

# one preset per chunk family: hebbian (none, fixed, scalar, per-key decay), delta (none, scalar), joint,
# KDA (per-key decay) and diagonal plus low rank
FAMILIES = ("linear_attention", "retnet", "mamba2", "gla", "deltanet", "gated_deltanet",
            "gated_deltanet_joint", "kda", "rwkv7_dplr")
SEQ_LENS = (8192, 16384, 32768, 65536)


@dataclass
class ScalingRow:
    family: str
    form: str
    T: int
    mode: str
    ms: float
    us_per_token: float
    vs_shortest: float  # us_per_token / us_per_token at the shortest T of the run
    saved_mb: float | None
    peak_mb: float


def run_scaling(families=FAMILIES, Ts=SEQ_LENS, *, mode: str = "fwdbwd", B: int = 1, H: int = 1,
                K: int = 64, V: int = 64, repeats: int = 2, log=print) -> list[dict]:
    """Rows (dicts) of ``ScalingRow``, one per (family, T)."""
    torch.manual_seed(0)
    rows: list[ScalingRow] = []
    for family in families:
        spec = get_preset(family)
        form = lower(spec, "chunk")
        first = None
        for T in sorted(Ts):
            case = make_case(spec, B=B, T=T, H=H, K=K, V=V, dtype=torch.float32, with_state=False)
            inputs = {n: t.detach() for n, t in case.tensors.items()}
            extra = {} if case.scale is None else {"scale": case.scale}
            fn = lambda q, k, v, **kw: form.fn(q, k, v, **kw, **extra)  # noqa: E731
            ms, peak_mb, saved_mb = measure(fn, inputs, mode, repeats)
            us = 1e3 * ms / (B * T)
            first = us if first is None else first
            row = ScalingRow(family, form.name, T, mode, ms, us, us / first,
                             saved_mb, peak_mb)
            rows.append(row)
            log(f"  {family:22s} T={T:6d} {mode:6s} {ms:9.1f} ms  {us:6.2f} us/token  x{row.vs_shortest:4.2f}"
                + (f"  saved {saved_mb:8.1f} MB" if saved_mb is not None else "") + f"  peak {peak_mb:8.1f} MB")
    return [asdict(r) for r in rows]


def markdown_table(rows: list[dict]) -> str:
    """One line per family: µs per token at each T, and the ratio of the longest to the shortest."""
    Ts = sorted({r["T"] for r in rows})
    lines = ["| family | form | mode | " + " | ".join(f"T={T}" for T in Ts) + " | longest / shortest |",
             "|---|---|---|" + "---|" * (len(Ts) + 1)]
    keyed = {}
    for r in rows:
        keyed.setdefault((r["family"], r["form"], r["mode"]), {})[r["T"]] = r
    for (fam, form, mode), by_T in keyed.items():
        cells = [f"{by_T[T]['us_per_token']:.2f} µs" if T in by_T else "" for T in Ts]
        ratio = by_T[max(by_T)]["vs_shortest"]
        lines.append(f"| {fam} | {form} | {mode} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return "\n".join(lines)
