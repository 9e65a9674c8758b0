"""`assocmem bench backends` (also `assocmem bench mixers --device cuda`, `make bench-gpu`): every kernel
backend of each mixer family against FLA's kernel called directly and causal SDPA, at one shape, in one run.

Per family and T (default B=8, H=16, K=V=128, T ∈ {2048, 8192}; q, k, v in bf16 and the gates in
float32, as a layer under bf16 autocast passes them), forward and forward+backward, the implementations

    fla           FLA's chunk kernel called directly, with its own arguments made before the timed region
                  (the class table's fla column, mixers/lower.py; the argument map of ops/fla.py)
    auto          lower(spec, backend="auto"): what a layer runs on this device (FLA's kernel where FLA takes
                  the call, else the compiled form, else the eager one); the row names the backend chosen
    compiled      lower(spec, backend="compiled"): the form through torch.compile
    eager         lower(spec, backend="torch"): the form as written, the reference of every check
    transformers  transformers' torch path of the family (mixers/external.py), where it has one
    sdpa          causal scaled_dot_product_attention at the same B, H, T, K: the quadratic baseline

Each row, in turn:

1. the first call, timed on its own (``first_call_s``): torch.compile's compiling and Triton's
   autotuning land there, never in ``ms``;
2. its result against eager's on the same inputs: the output and, for fwdbwd, the gradients of every
   input it shares with eager's call; ``max_err`` = max |x − x_eager| / max |x_eager| over them. Above
   ``TOL`` of the dtype the row is ``wrong`` and is not timed: a fast wrong answer is no result.
   sdpa computes another function and is not checked;
3. ``WARMUP`` untimed calls, then ``repeats`` timed ones (CUDA events on a GPU, the host clock after a
   synchronize elsewhere): ``ms`` is their median, ``vs_fla`` = ms / the fla row's ms (same family, T
   and mode, same run).

Each row has at most ``case_budget_s`` seconds and the bench ``budget_s`` (budget.py); a row cut off
reads ``skipped: budget``. The status of a row: ok, wrong, refused (FLA would refuse the call: reason
and fix from mixers/kernels.py), error (what it raised), skipped: budget, or n/a (no such implementation).
Rows are handed to ``on_row`` as they finish (the CLI rewrites its JSON after each), so a run that is
killed keeps what it measured.

On CPU the same code runs at small shapes; ``env`` (mixers/kernels.py ``FlaEnv``) injects FLA's
kernels, e.g. its pure-torch naive references (``assocmem bench backends --device cpu --naive-fla``).
Timings are ratios within one run; nothing here is asserted in tests.
"""
from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from assocmem.mixers.external import external_references
from assocmem.mixers.kernels import FlaEnv, fla_status
from assocmem.mixers.lower import fla_kernel, lower
from assocmem.mixers.ops.fla import FLA_KERNELS, fla_ops
from assocmem.mixers.presets import get_preset
from assocmem.mixers.spec import MixerSpec
from assocmem.mixers.verify import make_case

from .budget import Budget, BudgetExceeded

# the FLA classes, then SCA (prefix sum) and one spec of the scan class: compiled-only classes
FAMILIES = ("gated_deltanet", "mamba2", "gla", "deltanet", "kda", "sca", "huber_delta")
COLUMNS = ("fla", "auto", "compiled", "eager", "transformers", "sdpa")  # the table's order
ORDER = ("eager", "fla", "auto", "transformers", "sdpa", "compiled")  # run order: the reference first, compiling last
# largest relative error against eager that passes, by input dtype: bf16 carries 8 significant bits through
# sums of T terms in two different orders; float32 allows FLA's TF32 dots
TOL = {torch.bfloat16: 5e-2, torch.float16: 1e-2, torch.float32: 1e-3, torch.float64: 1e-9}
WARMUP = 2
LOW_PRECISION_INPUTS = ("q", "k", "v", "removal_key")  # what autocast hands the op in bf16; gates stay float32
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Shape:
    B: int = 8
    H: int = 16
    K: int = 128
    V: int = 128
    dtype: torch.dtype = torch.bfloat16


@dataclass
class Impl:
    """One implementation of a (family, T, mode) case: ``fn(**inputs)`` returns o [B, T, H, V].

    same: its input name -> eager's input name holding the same values (whose gradients are compared);
    status: why it does not run (refused / n/a), or None."""

    name: str
    what: str
    fn: Callable | None = None
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    same: dict[str, str] = field(default_factory=dict)
    checked: bool = True
    status: str | None = None


# ------------------------------------------------------------------ inputs


def sized(spec: MixerSpec, H: int, K: int) -> MixerSpec:
    """``spec`` with H heads of width K (what FLA's availability checks read)."""
    return spec.model_copy(update={"layer": spec.layer.model_copy(update={"num_heads": H, "head_dim": K})})


def case_inputs(spec: MixerSpec, T: int, shape: Shape, device: torch.device) -> tuple[dict, float | None]:
    """Random op inputs on ``device``: q, k, v (and RWKV-7's removal key) in ``shape.dtype``, gates float32."""
    case = make_case(spec, B=shape.B, T=T, H=shape.H, K=shape.K, V=shape.V, dtype=torch.float32, with_state=False)
    low = lambda n: shape.dtype if n in LOW_PRECISION_INPUTS else torch.float32  # noqa: E731
    return {n: t.detach().to(device, low(n)) for n, t in case.tensors.items()}, case.scale


def leaves(inputs: dict[str, torch.Tensor], grad: bool) -> dict[str, torch.Tensor]:
    return {n: t.detach().requires_grad_(grad and t.is_floating_point()) for n, t in inputs.items()}


# ------------------------------------------------------------------ implementations


def _op(fn: Callable, scale: float | None) -> Callable:
    """An op-contract function as ``fn(**inputs) -> o``."""
    extra = {} if scale is None else {"scale": scale}
    return lambda q, k, v, **gates: fn(q, k, v, **gates, **extra)[0]


def lowered(spec, backend: str, inputs, scale, device, dtype, grad: bool, env: FlaEnv | None) -> Impl:
    """The auto / compiled / eager row: ``lower(spec, backend=...)``; its ``what`` names the backend chosen."""
    name = {"torch": "eager"}.get(backend, backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            form = lower(spec, backend=backend, device=device, dtype=dtype, grad=grad, env=env)
        except ValueError as err:
            return Impl(name, "", status=f"n/a: {err}")
    what = f"{form.name} [{form.backend}] {form.why}" + "".join(f"; warned: {w.message}" for w in caught)
    return Impl(name, what, _op(form.fn, scale), leaves(inputs, grad), {n: n for n in inputs})


def fla_direct(spec, inputs, scale, device, dtype, grad: bool, env: FlaEnv | None) -> Impl:
    """FLA's chunk kernel with its own arguments (made here, outside the timed region, by ops/fla.py's map)."""
    kernel, why = fla_kernel(spec, "chunk")
    if kernel is None:
        return Impl("fla", "", status=f"n/a: {why}")
    row = FLA_KERNELS[kernel]
    ok, reason, fix = fla_status(kernel, device, dtype, spec.layer.head_dim, spec.layer.value_dim, grad=grad, env=env)
    if not ok:
        return Impl("fla", f"FLA {row.chunk}", status=f"refused: {reason}" + (f"; fix: {fix}" if fix else ""))
    entry = getattr(fla_ops() if env is None or env.kernels is None else env.kernels, row.chunk)
    args = row.args(inputs["q"], inputs["k"], inputs["v"], inputs.get("log_alpha"), inputs.get("beta"),
                    inputs.get("removal_key"))
    kw, pos = (args, ()) if isinstance(args, dict) else args
    tensors = {**{n: x for n, x in kw.items() if torch.is_tensor(x)}, **{f"arg{i}": x for i, x in enumerate(pos)}}
    consts = {n: x for n, x in kw.items() if not torch.is_tensor(x)}
    consts.update(scale=spec.layer.head_dim ** -0.5 if scale is None else float(scale), initial_state=None,
                  output_final_state=False)
    same = {n: m for n, x in tensors.items() for m, y in inputs.items() if x is y}

    def call(q, k, v, **rest):
        positional = [rest.pop(f"arg{i}") for i in range(len(pos))]
        return entry(q, k, v, *positional, **rest, **consts)[0]

    return Impl("fla", f"FLA {row.chunk} ({row.paper})", call, leaves(tensors, grad), same)


def transformers_path(spec, inputs, scale, grad: bool) -> Impl:
    """transformers' chunked torch function of the family (mixers/external.py), where one exists."""
    refs = [r for r in external_references(spec) if r.name.startswith("transformers:") and "chunk" in r.name]
    if not refs:
        return Impl("transformers", "", status="n/a: transformers has no torch path for this family")
    ref = refs[0]
    shared = ref.grad_inputs or tuple(inputs)
    return Impl("transformers", ref.name, _op(ref.fn, scale), leaves(inputs, grad),
                {n: n for n in inputs if n in shared})


def sdpa(inputs, grad: bool) -> Impl:
    """Causal softmax attention with q, k, v shaped as the case's v, [B, T, H, V] (another function: not checked)."""
    g = torch.Generator(inputs["v"].device).manual_seed(2)
    q, k, v = (torch.randn(inputs["v"].transpose(1, 2).shape, generator=g, device=inputs["v"].device,
                           dtype=inputs["v"].dtype) for _ in range(3))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)  # noqa: E731
    return Impl("sdpa", "scaled_dot_product_attention(is_causal=True)", fn, leaves(dict(q=q, k=k, v=v), grad),
                checked=False)


def implementations(spec, inputs, scale, device, dtype, grad: bool, env: FlaEnv | None) -> dict[str, Impl]:
    """Every row of one case, in run order (``ORDER``)."""
    make = {
        "eager": lambda: lowered(spec, "torch", inputs, scale, device, dtype, grad, env),
        "fla": lambda: fla_direct(spec, inputs, scale, device, dtype, grad, env),
        "auto": lambda: lowered(spec, "auto", inputs, scale, device, dtype, grad, env),
        "transformers": lambda: transformers_path(spec, inputs, scale, grad),
        "sdpa": lambda: sdpa(inputs, grad),
        "compiled": lambda: lowered(spec, "compiled", inputs, scale, device, dtype, grad, env),
    }
    return {name: make[name]() for name in ORDER}


# ------------------------------------------------------------------ one call, its check and its time


class Cotangent:
    """The output gradient of a case: one fixed random tensor per output shape and dtype, the same for every
    implementation (a dense one: a stride-0 cotangent takes slow paths)."""

    def __init__(self, seed: int = 1):
        self.seed, self.made = seed, {}

    def __call__(self, o: torch.Tensor) -> torch.Tensor:
        key = (tuple(o.shape), o.dtype, str(o.device))
        if key not in self.made:
            g = torch.Generator().manual_seed(self.seed)
            self.made[key] = torch.randn(o.shape, generator=g).to(o.device, o.dtype)
        return self.made[key]


def call(impl: Impl, grad: bool, do: Cotangent) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(o, {input name: gradient}) of one call (forward without autograd when not ``grad``)."""
    if not grad:
        with torch.no_grad():
            return impl.fn(**impl.inputs), {}
    o = impl.fn(**impl.inputs)
    wrt = {n: t for n, t in impl.inputs.items() if t.requires_grad}
    grads = torch.autograd.grad(o, list(wrt.values()), do(o), allow_unused=True)
    return o, {n: g for n, g in zip(wrt, grads) if g is not None}


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x − ref| / max |ref| (inf for a non-finite x or a shape mismatch)."""
    if x.shape != ref.shape:
        return float("inf")
    x, ref = x.float(), ref.float()
    err = ((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    return err if err == err else float("inf")  # NaN -> inf


def max_error(impl: Impl, got: tuple, ref: tuple) -> float:
    """Largest relative error of the output and the shared inputs' gradients against eager's."""
    (o, grads), (o_ref, grads_ref) = got, ref
    errs = [relative_error(o, o_ref)]
    errs += [relative_error(g, grads_ref[impl.same[n]]) for n, g in grads.items()
             if n in impl.same and impl.same[n] in grads_ref]
    return max(errs)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one call: CUDA events on a GPU, else the host clock."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


def first_call(impl: Impl, grad: bool, do, device) -> tuple[tuple, float]:
    """(result, seconds) of the first call: compiling and autotuning included, wall clock after a synchronize."""
    sync(device)
    t0 = time.perf_counter()
    out = call(impl, grad, do)
    sync(device)
    return out, time.perf_counter() - t0


def measure(impl: Impl, grad: bool, do, device, ref: tuple | None, tol: float, repeats: int, budget: Budget,
            keep: dict) -> dict:
    """The row of one implementation: first call, check against ``ref`` (eager's (o, grads)), warm timing.
    Eager is the reference: its first result goes to ``keep["reference"]`` before it is timed."""
    row: dict = {"status": "ok", "ms": None, "first_call_s": None, "max_err": None}
    got, row["first_call_s"] = first_call(impl, grad, do, device)
    if impl.name == "eager":
        keep["reference"], row["max_err"] = got, 0.0
    elif impl.checked and ref is not None:
        row["max_err"] = max_error(impl, got, ref)
        if not row["max_err"] <= tol:
            row["status"] = f"wrong: max error {row['max_err']:.3g} > {tol:g} against eager"
            return row
    elif impl.checked:
        row["status"] = "ok (unchecked: eager did not run)"
    del got
    times = []
    for i in range(WARMUP + repeats):
        budget.check()
        ms = timed_ms(lambda: call(impl, grad, do), device)
        if i >= WARMUP:
            times.append(ms)
    row["ms"] = statistics.median(times)
    return row


def run_row(impl: Impl, grad: bool, do, device, ref, tol: float, repeats: int, budget: Budget,
            case_budget_s: float, keep: dict) -> dict:
    """``measure`` within the case budget; what it raised, or the budget cutting it off, becomes the row's status."""
    empty = {"ms": None, "first_call_s": None, "max_err": None}
    if impl.status is not None:
        return {"status": impl.status, **empty}
    try:
        with budget.case(case_budget_s):
            row = measure(impl, grad, do, device, ref, tol, repeats, budget, keep)
    except torch.cuda.OutOfMemoryError:
        row = {"status": "error: out of memory", **empty}
    except Exception as err:  # noqa: BLE001  (an implementation that raises is a row that says what it raised)
        cut = budget_cut(err)
        first = str(err).splitlines()[0] if str(err) else ""
        row = {"status": f"skipped: budget ({cut})" if cut else f"error: {type(err).__name__}: {first}", **empty}
    settle(device)
    return row


def budget_cut(err: BaseException) -> BudgetExceeded | None:
    """The BudgetExceeded behind ``err``: raised in the body, or inside torch.compile, which wraps it."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, BudgetExceeded):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def settle(device: torch.device) -> None:
    """Wait for the device and hand back cached blocks between rows (a row cut off may leave work queued)."""
    try:
        sync(device)
    except Exception:  # noqa: BLE001  (a failed kernel reports here too; its row already says so)
        pass
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------ the bench


def run_backends(families=FAMILIES, Ts=(2048, 8192), modes=("fwd", "fwdbwd"), *, shape: Shape = Shape(),
                 device: str = "cuda", env: FlaEnv | None = None, impls: tuple[str, ...] = COLUMNS,
                 repeats: int = 10, budget_s: float = 270.0, case_budget_s: float = 45.0, tol: float | None = None,
                 log=print, on_row=None) -> list[dict]:
    """All rows (JSON-ready dicts), in two passes over T, then family, then mode: first every implementation
    but compiled, then the compiled rows (each compiles its graphs: tens of seconds), so a budget that
    runs out costs compiled rows and the longest sequences first. Within a case eager runs first (the
    reference of the checks; in the second pass it runs once, untimed, for the checks)."""
    device = torch.device(device)
    tol = TOL[shape.dtype] if tol is None else tol
    _allow_recompiles()
    rows: list[dict] = []
    passes = [tuple(i for i in impls if i != "compiled"), tuple(i for i in impls if i == "compiled")]
    with Budget(budget_s) as budget:
        for chosen in (p for p in passes if p):
            for T in Ts:
                for family in families:
                    run_case(family, T, modes, shape, device, env, chosen, repeats, budget, case_budget_s, tol, log,
                             rows, on_row or (lambda rows: None))
    return rows


def _allow_recompiles(limit: int = 64) -> None:
    """Let dynamo compile every (family, C, dtype, grad mode, T) configuration of a form: past its default
    limit of 8 per function it would run the rest eagerly, and a 'compiled' row would time eager code."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), limit))


def run_case(family, T, modes, shape, device, env, impls, repeats, budget, case_budget_s, tol, log, rows: list,
             on_row: Callable[[list], None]) -> None:
    """Append the rows of ``impls`` of one family at one T to ``rows`` (every mode), calling ``on_row(rows)``
    after each; eager runs first, as a row when it is in ``impls``, else only as the checks' reference."""
    spec = sized(get_preset(family), shape.H, shape.K)
    torch.manual_seed(0)
    try:
        inputs, scale = case_inputs(spec, T, shape, device)
    except torch.cuda.OutOfMemoryError:
        inputs = None
    for mode in modes:
        grad = mode == "fwdbwd"
        base = dict(family=family, T=T, mode=mode, B=shape.B, H=shape.H, K=shape.K, V=shape.V,
                    dtype=str(shape.dtype).removeprefix("torch."), tol=tol)
        found = (implementations(spec, inputs, scale, device, shape.dtype, grad, env) if inputs is not None
                 else {n: Impl(n, "", status="error: out of memory making the inputs") for n in ORDER})
        do, keep = Cotangent(), {}
        if "eager" not in impls:
            reference(found["eager"], grad, do, device, budget, case_budget_s, keep)
        for name, impl in found.items():
            if name not in impls:
                continue
            row = {**base, "impl": name, "what": impl.what,
                   **run_row(impl, grad, do, device, keep.get("reference"), tol, repeats, budget, case_budget_s, keep)}
            rows.append(row)
            log(format_row(row))
            add_ratios(rows)
            on_row(rows)
        del keep


def reference(eager: Impl, grad: bool, do, device, budget: Budget, case_budget_s: float, keep: dict) -> None:
    """Eager's first result into ``keep["reference"]``, untimed (nothing when it cannot run)."""
    if eager.status is not None:
        return
    try:
        with budget.case(case_budget_s):
            keep["reference"] = call(eager, grad, do)
    except Exception:  # noqa: BLE001  (the rows checked against it then say 'unchecked')
        keep.pop("reference", None)
    settle(device)


def add_ratios(rows: list[dict]) -> None:
    """``vs_fla``: ms over the fla row's ms of the same family, T and mode (None where either is missing)."""
    fla = {(r["family"], r["T"], r["mode"]): r["ms"] for r in rows if r["impl"] == "fla"}
    for r in rows:
        base = fla.get((r["family"], r["T"], r["mode"]))
        r["vs_fla"] = None if r["ms"] is None or not base else r["ms"] / base


def format_row(r: dict) -> str:
    ms = f"{r['ms']:9.3f} ms" if r["ms"] is not None else " " * 12
    first = f"  first call {r['first_call_s']:7.2f} s" if r["first_call_s"] is not None else ""
    err = f"  max err {r['max_err']:.2e}" if r["max_err"] is not None else ""
    status = "" if r["status"] == "ok" else f"  [{r['status']}]"
    return f"  {r['family']:15s} T={r['T']:6d} {r['mode']:6s} {r['impl']:12s} {ms}{first}{err}{status}"


def environment(device: str | torch.device) -> dict:
    """What a GPU bench's numbers depend on: torch, triton, FLA and transformers versions, the device."""
    import importlib.metadata

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    device = torch.device(device)
    out = {"device": device.type, "torch": torch.__version__, "triton": version("triton"),
           "fla-core": version("fla-core"), "flash-linear-attention": version("flash-linear-attention"),
           "transformers": version("transformers"), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        out.update(gpu=torch.cuda.get_device_name(device), capability=list(torch.cuda.get_device_capability(device)))
    return out


# ------------------------------------------------------------------ tables


def _cell(r: dict | None, key: str = "ms") -> str:
    if r is None:
        return ""
    if r[key] is not None:
        return f"{r[key]:.2f}"
    return "" if key != "ms" else r["status"].split(":")[0]


def markdown_tables(rows: list[dict]) -> str:
    """Two tables, one line per (family, T, mode): the warm ms of every implementation with auto / fla and
    compiled / eager, then the first call's seconds (compile + autotune); then the reasons of the rows that
    did not run."""
    cases: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        cases.setdefault((r["family"], r["T"], r["mode"]), {})[r["impl"]] = r
    ratio = lambda a, b: f"{a['ms'] / b['ms']:.2f}" if a and b and a["ms"] and b["ms"] else ""  # noqa: E731
    head = "| family | T | mode | " + " | ".join(COLUMNS)
    ms = [head + " | auto / fla | compiled / eager |", "|---" * (len(COLUMNS) + 5) + "|"]
    first = [head + " |", "|---" * (len(COLUMNS) + 3) + "|"]
    for (fam, T, mode), by in cases.items():
        auto = by.get("auto")
        cells = [_cell(by.get(c)) + (f" ({_backend(auto)})" if c == "auto" and auto and auto["ms"] else "")
                 for c in COLUMNS]
        ms.append(f"| {fam} | {T} | {mode} | " + " | ".join(cells)
                  + f" | {ratio(auto, by.get('fla'))} | {ratio(by.get('compiled'), by.get('eager'))} |")
        seconds = " | ".join(_cell(by.get(c), "first_call_s") for c in COLUMNS)
        first.append(f"| {fam} | {T} | {mode} | {seconds} |")
    reasons = sorted({f"- {r['family']} {r['impl']}: {r['status']}" for r in rows if not r["status"].startswith("ok")})
    return "\n".join(["warm milliseconds (median):", "", *ms, "", "first call, seconds (compile + autotune + one run):",
                      "", *first] + (["", "rows that did not run:", "", *reasons] if reasons else []))


def _backend(row: dict) -> str:
    """The backend auto chose, from its row's ``what`` ("chunk [fla] ...")."""
    what = row.get("what", "")
    return what[what.find("[") + 1:what.find("]")] if "[" in what else "?"
