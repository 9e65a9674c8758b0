"""`assocmem bench mixers`: forms of each family against the derivation and
external pure-PyTorch peers, as ratios measured in one run.

Per family (B=1, H=4, K=V=64, float32 by default) and T ∈ {512, 2048, 8192}:
forward and forward+backward milliseconds (median of repeats) of

    derived      the autograd derivation (T ≤ 2048: it is slow by design)
    recurrent    the hand-written recurrence
    chunk / prefix_sum / sdpa / masked_matmul   the exact fast forms
    chunk (compiled) / prefix_sum (compiled)    the same forms through torch.compile (mixers/ops/compiled.py;
                 their first call, which compiles, is timed on its own: ``compile_s``)
    external     transformers' torch_chunk_gated_delta_rule, mamba2_chunk_scan,
                 FLA's naive chunk files (when installed)

plus achieved GFLOP/s of the chunkwise forms (nominal FLOP counts below)
against an fp32 matmul peak measured in the same run, and peak memory: the
peak resident-set growth during the call (sampled every 0.5 ms, after
malloc_trim), and for forward+backward the bytes autograd saved for backward.
"""
from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from assocmem.memories import derive
from assocmem.mixers.external import external_references
from assocmem.mixers.lower import COMPILABLE, available_forms, default_chunk_size, hand_written, lower
from assocmem.mixers.presets import get_preset
from assocmem.mixers.verify import make_case

from .timing import matmul_peak_gflops, measure, measure_round_robin, time_call

FAMILIES = ("gated_deltanet", "mamba2", "gla", "sca", "softmax")
DERIVED_MAX_T = 2048
PEER_CHUNK = 64  # chunk size of the external chunked peers (transformers, FLA naive files)


@dataclass
class BenchRow:
    family: str
    impl: str
    T: int
    mode: str  # "fwd" or "fwdbwd"
    ms: float
    gflops: float | None
    peak_mb: float
    saved_mb: float | None
    compile_s: float | None = None  # compiled forms: seconds of the first call (compiling + one run)


# ------------------------------------------------------------------ FLOP counts


def chunk_flops(family: str, B: int, T: int, H: int, K: int, V: int, C: int | None = 64) -> float | None:
    """Nominal FLOPs of a chunkwise forward (matmuls only); C is unused by softmax attention."""
    if family == "softmax":  # causal QKᵀ and P·V
        return B * H * T * T * (K + V)
    if family == "gated_deltanet":  # KKᵀ, solve, W, U, WS, QKᵀ, A·(U−WS), QS, KᵀU
        per = 2 * C * C * K + C**3 / 3 + 2 * C * C * K + 2 * C * C * V + 2 * C * K * V \
            + 2 * C * C * K + 2 * C * C * V + 2 * C * K * V + 2 * C * K * V
        return B * H * (T // C) * per
    if family in ("mamba2", "gla"):  # QKᵀ, A·V, QS, KᵀV
        return B * H * (T // C) * (2 * C * C * K + 2 * C * C * V + 4 * C * K * V)
    return None


# ------------------------------------------------------------------ families


def implementations(family: str, T: int, K: int = 64, compiled: bool = False) -> dict[str, Callable]:
    """name -> op of one family at length T (head width K); ``compiled``: the compiled forms too."""
    spec = get_preset(family)
    impls: dict[str, Callable] = {}
    if T <= DERIVED_MAX_T:
        impls["derived"] = derive(spec)
    hw = hand_written(spec)
    if hw is not None and (family != "softmax" or T <= DERIVED_MAX_T):
        impls[f"recurrent ({hw[0]})"] = hw[1]
    for form in ("chunk", "prefix_sum", "masked_matmul", "sdpa", "selective_scan"):
        if form in available_forms(spec) and not (form == "masked_matmul" and T > DERIVED_MAX_T):
            impls[form] = lower(spec, form).fn
        if compiled and form in available_forms(spec) and form in COMPILABLE:
            impls[f"{form} {COMPILED}"] = lower(spec, form, compile=True).fn
    if "chunk" in impls and default_chunk_size(spec, K) != PEER_CHUNK:
        # the peers' chunk size next to the default (C = K/2 for the delta class): same algebra, more FLOPs
        impls[f"chunk C={PEER_CHUNK}"] = functools.partial(impls["chunk"], chunk_size=PEER_CHUNK)
    for ref in external_references(spec):
        if "chunk" in ref.name:
            impls[ref.name] = ref.fn
    return impls


FAST_REPEATS = 11
COMPILED = "(compiled)"  # suffix of the compiled forms' rows


def _is_fast(impl: str) -> bool:
    """Our parallel forms (chunk at its default or at a given C, compiled or not, sdpa), whose GFLOP/s are
    reported."""
    return impl in ("chunk", "sdpa", f"chunk {COMPILED}") or impl.startswith("chunk C=")


def chunk_size_used(spec, impl: str, K: int) -> int | None:
    """C of a chunk row: the one named in it, else the op's default for head width K (None: no chunk form)."""
    if impl.startswith("chunk C="):
        return int(impl.split("=")[1])
    if impl.startswith("prefix_sum"):
        return None
    return default_chunk_size(spec, K)


def _is_reference(impl: str) -> bool:
    """The slow references (one timed call each): the derivation and the hand-written recurrence."""
    return impl == "derived" or impl.startswith("recurrent")


def bench_family(family: str, Ts, modes, *, B=1, H=4, K=64, V=64, peak: float, log=print,
                 only: tuple[str, ...] = (), compiled: bool = False) -> list[BenchRow]:
    """Rows of one family; ``only`` keeps implementations whose name contains one of its strings.

    Per (T, mode): the fast forms and the external peers are timed round-robin
    (``measure_round_robin``, FAST_REPEATS rounds) before the slow references run, so
    the multi-GB references cannot leave the allocator in a different state for one
    side of a ratio; the references get one timed call each.
    """
    spec = get_preset(family)
    rows = []
    for T in Ts:
        case = make_case(spec, B=B, T=T, H=H, K=K, V=V, dtype=torch.float32, with_state=False)
        inputs = {n: t.detach() for n, t in case.tensors.items()}
        extra = {} if case.scale is None else {"scale": case.scale}
        bind = lambda f: lambda q, k, v, **kw: f(q, k, v, **kw, **extra)  # noqa: E731
        impls = {name: bind(fn) for name, fn in implementations(family, T, K, compiled).items()
                 if not only or any(o in name for o in only)}
        fast = {n: f for n, f in impls.items() if not _is_reference(n)}
        refs = [n for n in impls if _is_reference(n)]
        for mode in modes:
            compile_s = {n: time_call(f, inputs, mode) for n, f in fast.items() if n.endswith(COMPILED)}
            results = measure_round_robin(fast, inputs, mode, FAST_REPEATS) if fast else {}
            for name in refs:
                results[name] = measure(impls[name], inputs, mode, 1, count_saved=name != "derived")
            for impl in impls:  # report in the order of ``implementations``
                ms, peak_mb, saved = results[impl]
                C = chunk_size_used(spec, impl, K)
                fl = chunk_flops(family, B, T, H, K, V, C) if _is_fast(impl) and mode == "fwd" else None
                gf = None if fl is None else fl / (ms / 1e3) / 1e9
                rows.append(BenchRow(family, impl, T, mode, ms, gf, peak_mb, saved, compile_s.get(impl)))
                log(f"  {family:15s} {impl:58s} T={T:5d} {mode:6s} {ms:10.2f} ms"
                    + (f"  {gf:6.1f} GFLOP/s ({100 * gf / peak:4.1f}% of peak)" if gf else "")
                    + f"  peak {peak_mb:7.1f} MB" + (f"  saved {saved:7.1f} MB" if saved is not None else "")
                    + (f"  first call (compiling) {compile_s[impl]:.1f} s" if impl in compile_s else ""))
    return rows


def run_bench(families=FAMILIES, Ts=(512, 2048, 8192), modes=("fwd", "fwdbwd"), log=print,
              only: tuple[str, ...] = (), compiled: bool = False) -> list[dict]:
    """All rows as dicts (JSON-ready); the first row is the matmul peak of this run."""
    torch.manual_seed(0)
    t0 = time.perf_counter()
    peak = matmul_peak_gflops()
    ms = 1e3 * (time.perf_counter() - t0)
    log(f"fp32 matmul peak (2048², {torch.get_num_threads()} threads): {peak:.1f} GFLOP/s")
    rows: list[BenchRow] = [BenchRow("matmul", "torch.mm 2048x2048 (peak)", 0, "fwd", ms, peak, 0.0, None)]
    for fam in families:
        rows += bench_family(fam, Ts, modes, peak=peak, log=log, only=only, compiled=compiled)
    return [asdict(r) for r in rows]


def _ratios(rows: list[dict]) -> dict[tuple, float]:
    """{(family, T, mode, fast form, other): how many times faster}: each fast form against
    the slower implementations of its family, same T and mode, and each compiled form against its
    eager form."""
    key = {(r["family"], r["impl"], r["T"], r["mode"]): r["ms"] for r in rows}
    fast = lambda impl: _is_fast(impl) or impl.startswith("prefix_sum")  # noqa: E731
    eager = lambda impl, other: impl.endswith(COMPILED) and other == impl.removesuffix(f" {COMPILED}")  # noqa: E731
    out = {}
    for (fam, impl, T, mode), ms in sorted(key.items()):
        if not fast(impl):
            continue
        for (f2, other, T2, m2), ms2 in sorted(key.items()):
            if (f2, T2, m2) == (fam, T, mode) and other != impl and (not fast(other) or eager(impl, other)):
                out[(fam, T, mode, impl, other)] = ms2 / ms
    return out


def ratio_table(rows: list[dict], runs: list[list[dict]] | None = None) -> list[str]:
    """Summary lines: each fast form against the slower implementations of its family.

    runs: the rows of separate processes (``median_rows``); each line then also gives the
    range of that ratio over the processes.
    """
    spread = [_ratios(r) for r in runs] if runs else []
    lines = []
    for (fam, T, mode, impl, other), ratio in _ratios(rows).items():
        line = f"{fam:15s} T={T:5d} {mode:6s} {impl} is {ratio:7.2f}x faster than {other}"
        seen = [s[(fam, T, mode, impl, other)] for s in spread if (fam, T, mode, impl, other) in s]
        if seen:
            line += f"  (range {min(seen):.2f}-{max(seen):.2f} over {len(seen)} processes)"
        lines.append(line)
    return lines


def median_rows(runs: list[list[dict]]) -> list[dict]:
    """One row per (family, impl, T, mode) from the rows of several processes: the median ms
    (GFLOP/s, peak and saved MB at the same median), plus ``ms_min`` and ``ms_max``."""
    groups: dict[tuple, list[dict]] = {}
    for rows in runs:
        for r in rows:
            groups.setdefault((r["family"], r["impl"], r["T"], r["mode"]), []).append(r)
    out = []
    for rs in groups.values():
        rs = sorted(rs, key=lambda r: r["ms"])
        mid = rs[(len(rs) - 1) // 2]  # the lower median: an actual measured row
        out.append({**mid, "ms_min": rs[0]["ms"], "ms_max": rs[-1]["ms"]})
    return out


def markdown_table(rows: list[dict]) -> str:
    """The rows as one markdown table: per (family, T, impl) the forward and forward+backward
    milliseconds, the forward GFLOP/s with its share of the run's matmul peak, and the MB
    saved for backward. Fast forms and peers are listed before the slow references."""
    peak = next((r["gflops"] for r in rows if r["family"] == "matmul"), None)
    cells: dict[tuple, dict] = {}
    for r in rows:
        if r["family"] != "matmul":
            cells.setdefault((r["family"], r["T"], r["impl"]), {})[r["mode"]] = r
    fmt = lambda r, key, f: "" if r is None or r.get(key) is None else f(r[key])  # noqa: E731
    lines = ["| family | T | implementation | fwd ms | fwd+bwd ms | fwd GFLOP/s (% of peak) | saved for bwd MB |",
             "|---|---|---|---|---|---|---|"]
    first = {k: (c.get("fwd") or {}).get("compile_s") for k, c in cells.items()}  # compiled: first fwd call, s
    order = {f: i for i, f in enumerate(dict.fromkeys(k[0] for k in cells))}
    for fam, T, impl in sorted(cells, key=lambda k: (order[k[0]], k[1], _is_reference(k[2]))):
        fwd, bwd = cells[(fam, T, impl)].get("fwd"), cells[(fam, T, impl)].get("fwdbwd")
        gf = fmt(fwd, "gflops", lambda g: f"{g:.1f}" + (f" ({100 * g / peak:.1f}%)" if peak else ""))
        name = impl + (f" (first call {first[(fam, T, impl)]:.0f} s)" if first[(fam, T, impl)] else "")
        lines.append(f"| {fam} | {T} | {name} | {fmt(fwd, 'ms', '{:.2f}'.format)} | "
                     f"{fmt(bwd, 'ms', '{:.2f}'.format)} | {gf} | {fmt(bwd, 'saved_mb', '{:.1f}'.format)} |")
    return "\n".join(lines)
