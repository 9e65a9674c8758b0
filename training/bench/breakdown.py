"""`assocmem bench breakdown`: where the time of one form's call goes, by kind of op.

The bench (``forms.py``) says how fast a form is; this says why. One form of one
family runs on the bench's inputs (B=1, H=4, K=V=64, fp32 by default):

1. its wall time per call, unprofiled (median of ``repeats`` calls);
2. ``profiled_calls`` more calls, each under ``torch.profiler`` on its own (after one
   untimed profiled call), with input shapes recorded. Each op's self time goes to one kind:

       matmul, per-chunk    bmm/baddbmm/mm whose batch is B·H: the sequential carry
       matmul, batched      the products batched over chunks (and any mm)
       triangular solve     linalg_solve_triangular (the UT transform's diagonal blocks)
       fused attention      scaled_dot_product_attention's kernel (the sdpa form)
       copies               copy_, clone, pad, cat, stack, index: data moved, no FLOPs
       elementwise          exp, mul, cumsum, tril, clamp, reductions: every other op that
                            computes
       fused kernels        the C++/OpenMP (CPU) or Triton (GPU) kernels inductor generated for a
                            compiled form (``--compiled``, and the scan form, which is always
                            compiled), each reported by its generated name (``graph_<n>_cpp_fused_
                            <the ops it fuses>_<k>``): the products it leaves to aten
                            (bmm, solve) are still counted as products above
       views, allocation,   the ops that move no data (``NO_WORK_OPS``)
       dispatch

   An op that a product calls (baddbmm_ copies its accumulator first) counts as that
   product. A kind's time is the median over the profiled calls of its summed self time;
3. each kind's ms per call = its share of the profiled op time × the unprofiled wall
   time. The profiler slows a call down (1.3-2x here: its own cost per op, and fresh
   buffers faulting in), so the shares are the measurement and the ms an estimate;
4. the products' FLOPs read off their shapes (2·b·n·k·m) and their achieved GFLOP/s in
   place, inside the form (not in isolation, where the same products run faster);
5. the form's share of the fp32 matmul peak (measured in the same run) at its nominal
   FLOPs (``forms.chunk_flops``), and that share if everything but the products took
   no time: the ceiling of a design that keeps these products and fuses the rest away.

A compiled form is profiled with inductor's kernel profiling on (``cpp.enable_kernel_profile``,
set only while the breakdown runs), so each generated kernel shows as its own event; its first call
(which compiles) is timed on its own and reported as ``first_call_s``, and the longest kernels are
listed by name (``kernels``).
"""
from __future__ import annotations

import contextlib
import math
import re
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch

from assocmem.mixers.lower import lower
from assocmem.mixers.presets import ALIASES, get_preset
from assocmem.mixers.verify import make_case

from .forms import chunk_flops, chunk_size_used
from .timing import matmul_peak_gflops, time_call, time_round_robin

MATMUL_OPS = frozenset({"aten::bmm", "aten::baddbmm", "aten::baddbmm_", "aten::mm", "aten::addmm", "aten::addmm_"})
SOLVE_OPS = frozenset({"aten::linalg_solve_triangular"})
COPY_OPS = frozenset({"aten::copy_", "aten::clone", "aten::constant_pad_nd", "aten::cat", "aten::stack",
                      "aten::index", "aten::contiguous", "aten::_to_copy"})
# ops that move no data: their self time is dispatch (and the profiler's own cost)
NO_WORK_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::select", "aten::unbind",
    "aten::slice", "aten::as_strided", "aten::transpose", "aten::t", "aten::permute", "aten::expand",
    "aten::expand_as", "aten::unsqueeze", "aten::squeeze", "aten::alias", "aten::mT", "aten::diagonal",
    "aten::movedim", "aten::flatten", "aten::unflatten", "aten::detach", "aten::lift_fresh", "aten::empty",
    "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::resize_", "aten::result_type",
    "aten::to", "aten::matmul", "aten::resolve_conj", "aten::resolve_neg", "aten::split", "aten::chunk",
    "aten::narrow", "aten::view_as", "aten::split_with_sizes", "aten::broadcast_tensors", "aten::is_nonzero",
    "aten::item", "aten::_local_scalar_dense", "aten::zero_", "aten::fill_", "aten::zeros", "aten::zeros_like",
    "aten::ones", "aten::eye", "aten::arange", "aten::scalar_tensor", "aten::tensor", "aten::detach_"})
REST = "views, allocation, dispatch"
FUSED = "fused attention (sdpa)"
GENERATED = "fused kernels (inductor)"
KINDS = ("matmul, per-chunk", "matmul, batched", "triangular solve", FUSED, GENERATED, "copies", "elementwise", REST)
COMPILED_FORMS = frozenset({"scan"})  # forms whose op is torch.compile'd whether or not --compiled is given
# inductor's kernel events (cpp.enable_kernel_profile): graph_<n>_cpp_fused_..., or a Triton kernel's name
_GENERATED_KERNEL = re.compile(r"^(graph_\d+_)?(cpp_fused_|triton_)")
TOP_KERNELS = 8  # generated kernels listed by name


@dataclass
class KindRow:
    kind: str
    ms: float            # per call: share × the unprofiled wall time
    share: float         # of the profiled op time
    calls: int           # ops per call
    gflops: float | None  # achieved in place (products only)


def product_flops(name: str, shapes: list) -> float:
    """FLOPs of one matmul op from its recorded input shapes (0 if they are not recorded)."""
    if name in ("aten::baddbmm", "aten::baddbmm_", "aten::addmm", "aten::addmm_"):
        shapes = shapes[1:]  # (self, mat1, mat2, beta, alpha): the added term does not count
    mats = [s for s in shapes if isinstance(s, (list, tuple)) and len(s) in (2, 3)]
    if len(mats) < 2:
        return 0.0
    a, b = mats[0], mats[1]
    batch = a[0] if len(a) == 3 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def is_generated_kernel(name: str) -> bool:
    """Whether a profiler event is a kernel inductor generated (a compiled form's fused code)."""
    return _GENERATED_KERNEL.match(name) is not None


def kind_of(name: str, shapes: list, BH: int) -> str:
    """The kind of an op (module docstring); BH: the batch of a per-chunk product."""
    if is_generated_kernel(name):
        return GENERATED
    if name in MATMUL_OPS:  # every operand of a batched product (and baddbmm's self) has the batch first
        first = next((s for s in shapes if isinstance(s, (list, tuple)) and len(s) == 3), None)
        return "matmul, per-chunk" if first is not None and first[0] == BH else "matmul, batched"
    if name in SOLVE_OPS:
        return "triangular solve"
    if "scaled_dot_product" in name:
        return FUSED
    if name in COPY_OPS:
        return "copies"
    return REST if name in NO_WORK_OPS else "elementwise"


def _profile_one(call, BH: int):
    """One call under the profiler -> its aten and generated-kernel events as (kind, self µs, product
    FLOPs, own op, name), own op False for an op that a product called (counted in the product's time,
    not as an op)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        call()
    out = []
    for ev in prof.events():
        if not ev.name.startswith("aten::") and not is_generated_kernel(ev.name):
            continue
        owner = ev.cpu_parent if ev.cpu_parent is not None and ev.cpu_parent.name in MATMUL_OPS else ev
        shapes = list(ev.input_shapes or [])
        kind = kind_of(owner.name, list(owner.input_shapes or []), BH)
        fl = product_flops(ev.name, shapes) if ev.name in MATMUL_OPS else 0.0
        out.append((kind, ev.self_cpu_time_total, fl, owner is ev, ev.name))
    return out


class Profiled(NamedTuple):
    """Per call, over the profiled calls: median self µs, op count and product FLOPs of each kind,
    and the median self µs of each generated kernel (by name)."""
    us: dict[str, float]
    count: dict[str, int]
    flops: dict[str, float]
    kernel_us: dict[str, float]


def profile_kinds(call, calls: int, BH: int) -> Profiled:
    """``Profiled`` of ``calls`` profiled calls (module docstring, step 2)."""
    _profile_one(call, BH)  # the profiler's first call runs 2-3x slower
    per_call = [_profile_one(call, BH) for _ in range(calls)]
    us: dict[str, list[float]] = defaultdict(list)
    kernels: dict[str, list[float]] = defaultdict(list)
    names = {name for events in per_call for kind, *_, name in events if kind == GENERATED}
    for events in per_call:
        totals, by_name = defaultdict(float), defaultdict(float)
        for kind, t, _, _, name in events:
            totals[kind] += t
            if kind == GENERATED:
                by_name[name] += t
        for kind in KINDS:
            us[kind].append(totals[kind])
        for name in names:
            kernels[name].append(by_name[name])
    count = {kind: sum(1 for k, _, _, own, _ in per_call[0] if k == kind and own) for kind in KINDS}
    flops = {kind: sum(fl for k, _, fl, _, _ in per_call[0] if k == kind) for kind in KINDS}
    return Profiled({kind: statistics.median(ts) for kind, ts in us.items()}, count, flops,
                    {name: statistics.median(ts) for name, ts in kernels.items()})


def kernel_profiling(on: bool):
    """A context in which inductor compiles its kernels with profiler events (``on``), else a no-op."""
    if not on:
        return contextlib.nullcontext()
    import torch._inductor.config as inductor_config

    return inductor_config.patch({"cpp.enable_kernel_profile": True})


def breakdown(family: str, *, form: str = "auto", T: int = 2048, B: int = 1, H: int = 4, K: int = 64, V: int = 64,
              chunk_size: int | None = None, mode: str = "fwd", repeats: int = 11, profiled_calls: int = 5,
              peak: float | None = None, compiled: bool = False) -> dict:
    """The breakdown of one form's call (module docstring) as a JSON-ready dict.

    compiled: the form's compiled variant (``lower(spec, form, compile=True)``; a form without one is
    refused by ``lower``), its generated kernels profiled by name. Kernels compiled earlier in the same
    process carry no profiler events (the report then says so): the CLI runs in a fresh process.
    """
    spec = get_preset(family)
    family = ALIASES.get(family, family)
    lowered = lower(spec, form, compile=compiled)
    with kernel_profiling(compiled or lowered.name in COMPILED_FORMS):
        return _breakdown(spec, family, lowered, T=T, B=B, H=H, K=K, V=V, chunk_size=chunk_size, mode=mode,
                          repeats=repeats, profiled_calls=profiled_calls, peak=peak)


def _breakdown(spec, family: str, lowered, *, T, B, H, K, V, chunk_size, mode, repeats, profiled_calls, peak) -> dict:
    """``breakdown`` of the lowered form ``lowered`` (steps 1-5 of the module docstring)."""
    case = make_case(spec, B=B, T=T, H=H, K=K, V=V, dtype=torch.float32, with_state=False)
    inputs = {n: t.detach() for n, t in case.tensors.items()}
    kw = {} if case.scale is None else {"scale": case.scale}
    if chunk_size is not None:
        if lowered.name not in ("chunk", "chunk_approx"):
            raise ValueError(f"--chunk-size applies to chunk forms; the {lowered.name!r} form of {family} has none")
        kw["chunk_size"] = chunk_size

    def fn(q, k, v, **rest):
        return lowered.fn(q, k, v, **rest, **kw)

    peak = matmul_peak_gflops() if peak is None else peak
    t0 = time.perf_counter()
    time_call(fn, inputs, mode)  # a compiled form compiles here (and any form warms up)
    first_s = time.perf_counter() - t0
    wall = 1e3 * time_round_robin({"call": lambda: time_call(fn, inputs, mode)}, repeats)["call"]
    prof = profile_kinds(lambda: time_call(fn, inputs, mode), profiled_calls, B * H)
    profiled = sum(prof.us.values())  # µs of op time per profiled call
    rows = []
    for kind in KINDS:
        share = prof.us[kind] / profiled if profiled else 0.0
        ms = share * wall
        gf = prof.flops[kind] / (ms / 1e3) / 1e9 if prof.flops[kind] and ms else None
        rows.append(KindRow(kind, ms, share, prof.count[kind], gf))
    top = sorted(prof.kernel_us.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    out = {"family": family, "form": lowered.name, "compiled": lowered.compiled or lowered.name in COMPILED_FORMS,
           "T": T, "B": B, "H": H, "K": K, "V": V, "mode": mode,
           "ms": wall, "profiled_ms": profiled / 1e3, "peak_gflops": peak, "kinds": [asdict(r) for r in rows],
           "product_gflop": sum(prof.flops.values()) / 1e9, "first_call_s": first_s,
           "kernels": [{"name": n, "ms": wall * t / profiled, "share": t / profiled} for n, t in top if profiled]}
    if lowered.name == "chunk":
        C = chunk_size or chunk_size_used(spec, "chunk", K)
        nominal = chunk_flops(family, B, T, H, K, V, C)
        out["chunk_size"] = C
        if nominal is not None and mode == "fwd":
            products_ms = sum(r.ms for r in rows if r.kind.startswith("matmul"))
            out["nominal_gflop"] = nominal / 1e9
            out["share_of_peak"] = nominal / (wall / 1e3) / 1e9 / peak
            out["share_if_only_products"] = nominal / (products_ms / 1e3) / 1e9 / peak if products_ms else math.nan
    return out


def format_breakdown(r: dict) -> list[str]:
    """The breakdown as printable lines."""
    C = f", C={r['chunk_size']}" if "chunk_size" in r else ""
    comp = " (compiled)" if r.get("compiled") else ""
    lines = [f"{r['family']} {r['form']}{comp}{C}: B={r['B']} H={r['H']} K={r['K']} V={r['V']} T={r['T']} fp32 "
             f"{r['mode']}, {r['ms']:.2f} ms per call (median, unprofiled; {r['profiled_ms']:.2f} ms of op time "
             f"profiled)" + (f"; first call {r['first_call_s']:.1f} s (compiling)" if r.get("compiled") else ""),
             f"  {'kind of op':36s} {'ms/call':>8s} {'share':>6s} {'ops/call':>9s} {'GFLOP/s':>8s}"]
    for k in r["kinds"]:
        if k["kind"] in (FUSED, GENERATED) and not k["calls"]:
            continue  # only the sdpa form has the one, only compiled forms the other
        gf = f"{k['gflops']:8.1f}" if k["gflops"] else f"{'':8s}"
        lines.append(f"  {k['kind']:36s} {k['ms']:8.2f} {100 * k['share']:5.1f}% {k['calls']:9d} {gf}")
    lines.append(f"  fp32 matmul peak (2048², {torch.get_num_threads()} threads): {r['peak_gflops']:.1f} GFLOP/s; "
                 f"products: {r['product_gflop']:.3f} GFLOP per call")
    if r.get("compiled") and not _kernel_count(r):
        lines.append("  no generated kernel was profiled: the form was compiled earlier in this process without "
                     "kernel profiling; run the breakdown in a fresh process (`assocmem bench breakdown --compiled`)")
    if r.get("kernels"):
        lines.append(f"  the {len(r['kernels'])} longest generated kernels ({_kernel_count(r)} kernel calls per call):")
        lines += [f"    {k['ms']:8.2f} ms {100 * k['share']:5.1f}%  {k['name']}" for k in r["kernels"]]
    if "share_of_peak" in r:
        lines.append(f"  nominal chunk FLOPs {r['nominal_gflop']:.3f} GFLOP: {100 * r['share_of_peak']:.1f}% of the "
                     f"peak; {100 * r['share_if_only_products']:.1f}% if every op but the products took no time")
    return lines


def _kernel_count(r: dict) -> int:
    return next(k["calls"] for k in r["kinds"] if k["kind"] == GENERATED)
