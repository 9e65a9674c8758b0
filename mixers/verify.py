"""verify(spec): every implementation of a spec against its derivation.

On random float64 inputs consistent with the spec's layer options (unit-norm
keys for the delta rule, Mamba2's shared Δ, RetNet's fixed γ, positive
features for a normalised read-out, ...), compare the derived recurrence (the
ground truth) with

  1. the hand-written recurrence of the published rule, where one exists (with
     recurrent depth K > 1: the hand-written unrolled K-step loop);
  2. every exact lowered form (chunk, prefix sum, SDPA, compiled scan);
  3. the external references (external.py: transformers, FLA) that are installed;
  4. your own hand-written rules of the spec (references.py ``user_references``: the spec's
     ``reference`` and ``register_reference``), each also against every form of 1 and 2;

on outputs, final states and input gradients (one random cotangent), and
report the max abs error of each pair. For the Gated DeltaNet composition
order, a spec is also compared with the OTHER ordering, which must differ.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from assocmem.memories import L2Decay, Momentum, NonParametric, Spectral
from assocmem.memories.checks import gate_needs

from .external import external_references
from .lower import (
    APPROXIMATE, COMPILABLE, FAMILIES, available_forms, derived, family_of, hand_written, lower, readout, with_lr,
)
from .references import user_references
from .spec import MixerSpec

EXACT_ATOL = 1e-10  # float64, derived vs hand-written / lowered forms
F32_RTOL = 1e-5  # our forms run in float32 vs the float64 derivation, relative to each tensor's largest entry
LARGE = dict(B=1, T=1000, H=2, K=32, V=48)  # the larger shape verify(large=True) adds


@dataclass
class PairResult:
    preset: str
    pair: str
    max_abs_error: float
    passed: bool
    tolerance: float
    expect: str = "equal"  # "equal" or "differ"

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class Case:
    """Inputs of one verification run: tensors to differentiate + fixed keywords."""

    tensors: dict[str, torch.Tensor]  # q, k, v and gates (requires_grad)
    initial_state: object  # None, tensor or tuple
    scale: float | None


# ----------------------------------------------------------------- inputs


def make_case(spec: MixerSpec, *, B=2, T=33, H=2, K=8, V=6, dtype=torch.float64, seed=0,
              with_state=True) -> Case:
    """Random inputs consistent with ``spec``'s gates and layer options."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    if isinstance(spec.memory, Spectral):
        return _spectral_case(spec, rnd, B, T, H, K, with_state)
    square = spec.memory.kind == "diagonal" or getattr(spec.memory, "norm", "none") != "none"
    V = K if square else V
    q, k, v = rnd(B, T, H, K), rnd(B, T, H, K), rnd(B, T, H, V)
    if spec.layer.qk_norm == "l2":
        q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    if spec.layer.normalize:  # positive features (φ = 1 + elu), so the denominator Z_t φ(q) stays away from 0
        q, k = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    tensors = dict(q=q, k=k, v=v, **_gates(spec, rnd, B, T, H, K, V))
    if gate_needs(spec).removal_key:
        tensors["removal_key"] = torch.nn.functional.normalize(rnd(B, T, H, K), dim=-1)
    init = _matrix_state(spec, rnd, B, H, K, V) if with_state else None
    if isinstance(spec.memory, NonParametric) and with_state:
        init = (rnd(B, H, 3, K), rnd(B, H, 3, V))
    for t in tensors.values():
        t.requires_grad_(True)
    return Case(tensors, init, spec.layer.scale)


def _gates(spec, rnd, B, T, H, K, V) -> dict[str, torch.Tensor]:
    out = {}
    r, lay = spec.retention, spec.layer
    if lay.lr_gate == "dt":  # Mamba2: Δ = softplus(·), log a = Δ·A, A < 0 per head
        dt = torch.nn.functional.softplus(rnd(B, T, H))
        A = -torch.exp(0.5 * rnd(H))
        return dict(beta=dt, log_alpha=dt * A)
    if lay.lr_gate == "sigmoid" or family_of(spec).beta == "step":  # a step size is always drawn
        out["beta"] = torch.sigmoid(rnd(B, T, H, K) if gate_needs(spec).beta_key else rnd(B, T, H))
        if spec.bias.kind == "lp":  # ∇ ∝ |e|^{p−1}: keep the step in the stable (non-divergent) regime
            out["beta"] = 0.2 * out["beta"]
    if isinstance(r, L2Decay):
        if r.gate == "fixed":  # RetNet γ_h = 1 − 2^(−5−h)
            gamma = 1 - 2.0 ** (-5.0 - torch.arange(H, dtype=rnd(1).dtype))
            out["log_alpha"] = torch.log(gamma).expand(B, T, H).clone()
        elif r.gate == "key":
            out["log_alpha"] = torch.nn.functional.logsigmoid(rnd(B, T, H, K) + 3.0)
        elif r.gate == "entry":  # Mamba: log α_{t,n,d} = Δ_{t,d} A_{d,n}, Δ = softplus(·), A < 0 per entry
            out["log_alpha"] = torch.nn.functional.softplus(rnd(B, T, H, 1, V)) * -torch.exp(0.5 * rnd(H, K, V))
        else:
            out["log_alpha"] = torch.nn.functional.logsigmoid(rnd(B, T, H) + 3.0)
    if isinstance(spec.optimizer, Momentum):
        out["eta"] = torch.sigmoid(rnd(B, T, H) + 1.0)
    return out


def _matrix_state(spec, rnd, B, H, K, V):
    if isinstance(spec.memory, NonParametric):
        return None
    S = 0.1 * rnd(B, H, K, V)
    if spec.layer.normalize:  # [S, z]: z = Z_0ᵀ, a positive sum of keys
        S = torch.cat((S, 1 + rnd(B, H, K, 1).abs()), dim=-1)
    if spec.memory.kind == "diagonal":
        S = 0.1 * rnd(B, H, V)
    if spec.memory.kind == "mlp":
        return None  # the MLP memory starts from its own identity-like init
    return (S, 0.1 * rnd(*S.shape)) if isinstance(spec.optimizer, Momentum) else S


def _spectral_case(spec, rnd, B, T, H, D, with_state) -> Case:
    M = spec.memory.points
    q, v = rnd(B, T, H, D, M, 2), rnd(B, T, H, D)
    k = torch.nn.functional.softsign(rnd(B, T, H, D))
    p = torch.nn.functional.softplus(rnd(B, T, H))
    theta = 0.001 + 2.999 * torch.sigmoid(rnd(H, D, M))
    weights = torch.softmax(rnd(H, D, M), dim=-1)
    tensors = dict(q=q, k=k, v=v, beta=p, theta=theta, weights=weights)
    for t in tensors.values():
        t.requires_grad_(True)
    init = (torch.nn.functional.softplus(rnd(B, H)), rnd(B, H, D, M, 2)) if with_state else None
    return Case(tensors, init, None)


# ----------------------------------------------------------------- running


def _flat(x) -> list[torch.Tensor]:
    if x is None:
        return []
    return [x] if torch.is_tensor(x) else [t for item in x for t in _flat(item)]


def run(fn: Callable, case: Case, *, extra: dict | None = None, seed: int = 1, grad: bool = True,
        state_grad: bool = True) -> dict:
    """Output, final state (flattened) and the input gradients of ⟨o, c⟩ + Σᵢ ⟨Sᵢ, cᵢ⟩ for random
    cotangents c (the same for every implementation) on the output and, with ``state_grad``, on every
    final-state tensor. ``grad=False`` runs under ``torch.no_grad()`` (the inference path) and returns
    no gradients."""
    kw = dict(case.tensors)
    q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
    with torch.set_grad_enabled(grad):
        o, S = fn(q, k, v, **kw, scale=case.scale, initial_state=case.initial_state,
                  output_final_state=True, **(extra or {}))
    states = _flat(S)
    out = {"output": [o.detach()], "state": [x.detach() for x in states], "grad": {}}
    if not grad:
        return out
    g = torch.Generator().manual_seed(seed)
    cot = lambda t: torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype)  # noqa: E731
    loss = (o * cot(o)).sum()
    for s in states if state_grad else []:
        loss = loss + (s * cot(s)).sum()
    inputs = list(case.tensors.values())
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    out["grad"] = {n: torch.zeros_like(i) if gr is None else gr for n, i, gr in zip(case.tensors, inputs, grads)}
    return out


def cast(case: Case, dtype: torch.dtype) -> Case:
    """The same inputs in ``dtype`` (fresh leaves that require grad)."""
    to = lambda t: None if t is None else t.detach().to(dtype)  # noqa: E731
    tensors = {n: to(t).requires_grad_(True) for n, t in case.tensors.items()}
    init = case.initial_state
    init = to(init) if init is None or torch.is_tensor(init) else tuple(to(t) for t in init)
    return Case(tensors, init, case.scale)


def max_abs_error(a: dict, b: dict, grad_inputs: tuple[str, ...] | None = None, *, relative: bool = False) -> float:
    """Max abs difference over outputs, input gradients (all, or those named) and, when
    both return one, final states; ``relative``: each tensor's error divided by a's largest entry."""
    err = 0.0
    names = list(a["grad"]) if grad_inputs is None else list(grad_inputs)
    a = dict(a, grad=[a["grad"][n] for n in names])
    b = dict(b, grad=[b["grad"][n] for n in names])
    for key in ("output", "grad", "state"):
        if key == "state" and not (a[key] and b[key]):
            continue
        if len(a[key]) != len(b[key]):
            return float("inf")
        for x, y in zip(a[key], b[key]):
            if x.shape != y.shape:
                return float("inf")
            if x.numel():
                diff = float((x.to(torch.float64) - y.to(torch.float64)).abs().max())
                scale = float(x.abs().max()) if relative else 1.0
                err = max(err, diff / scale if scale else diff)
    return err


@dataclass(frozen=True)
class Pair:
    """One implementation compared with the derivation."""

    name: str
    fn: Callable  # the op contract
    tolerance: float
    with_state: bool  # takes an initial state and returns the final one
    extra: dict
    grad_inputs: tuple[str, ...] | None = None  # comparable gradients (None: all)
    ours: bool = True  # one of our forms: also run without autograd and in float32
    yours: bool = False  # a hand-written rule the user gave (references.py): every form is also held to it

    @property
    def label(self) -> str:
        """What is compared, without the 'derived vs ' of ``name``."""
        return self.name.removeprefix("derived vs ").removesuffix(" (your reference)")


def _pairs(spec: MixerSpec, compiled: bool = False) -> list[Pair]:
    """The implementations compared with the derivation; ``compiled``: also the compiled variant of each
    form that has one (``lower(spec, form, compile=True)``, mixers/ops/compiled.py)."""
    pairs = [Pair(f"derived vs {label} (your reference)", readout(spec, fn), EXACT_ATOL, True, {}, yours=True)
             for label, fn in user_references(spec)]
    hw = hand_written(spec)
    if hw is not None:
        pairs.append(Pair(f"derived vs {hw[0]} (hand-written)", hw[1], EXACT_ATOL, True, {}))
    for name in available_forms(spec):
        if name in APPROXIMATE or name == "recurrent":
            continue  # recurrent = the hand-written one above (or derived itself)
        extra = {"chunk_size": 16} if name == "chunk" else {}
        pairs.append(Pair(f"derived vs form:{name}", lower(spec, name).fn, EXACT_ATOL, True, extra))
        if compiled and name in COMPILABLE:
            pairs.append(Pair(f"derived vs form:{name} (compiled)", lower(spec, name, compile=True).fn, EXACT_ATOL,
                              True, extra))
    lr = getattr(spec.optimizer, "lr", 1.0) if family_of(spec).lr else 1.0
    for ref in external_references(spec):  # references take the step η_t itself: η_t = lr·β_t
        pairs.append(Pair(f"derived vs {ref.name}", with_lr(ref.fn, lr), ref.atol, ref.initial_state, {},
                          ref.grad_inputs, ours=False))
    return pairs


def _ordering_checks(spec: MixerSpec) -> list[tuple[str, Callable]]:
    """Gated DeltaNet composition order (retain then step, or one joint step): with a scalar decay
    and a step after it, the family of the other order (``Family.other_order``) must differ."""
    r, other = spec.retention, family_of(spec).other_order
    if other is None or not (isinstance(r, L2Decay) and r.gate != "key"):
        return []
    fam = FAMILIES[other[0]]
    return [(f"derived vs {fam.hand_written} ({other[1]})", fam.ops["recurrent"])]


def verify(spec: MixerSpec | str, *, T: int = 70, B: int = 2, H: int = 2, K: int = 8, V: int = 6,
           seed: int = 0, extras: bool = True, large: bool = False, compiled: bool = False,
           report: Callable[[str], None] | None = None) -> list[PairResult]:
    """Compare every implementation of ``spec`` with its derivation (float64): outputs, final states and
    the gradients of a random projection of both. ``extras``: our own forms also without autograd (the
    inference path) and in float32, and the other composition order; ``large``: every pair once more at
    LARGE (T=1000, K=32, V=48); ``compiled``: the compiled chunk / prefix_sum forms too (each compiles a few
    graphs: about a minute per preset on a small CPU). ``report``: called with one line of progress as the
    derivation starts and as each pair ends (``spec [k/n] pair: error verdict``), for a long run's caller."""
    from .presets import get_preset

    spec = get_preset(spec) if isinstance(spec, str) else spec
    label = spec.name or "custom"
    # the compiled scan form meets several dtypes, shapes and grad modes here: keep it compiled for all
    # of them (dynamo's default of 8 compiled variants would fall back to eager part way through)
    with torch._dynamo.config.patch(recompile_limit=256):
        results = _compare(spec, label, dict(B=B, T=T, H=H, K=K, V=V), seed, extras=extras, compiled=compiled,
                           report=report)
        if large:
            tag = f" [T={LARGE['T']}, K={LARGE['K']}, V={LARGE['V']}]"
            results += _compare(spec, label, LARGE, seed, extras=False, tag=tag, compiled=compiled, report=report)
    return results


def _compare(spec: MixerSpec, label: str, shape: dict, seed: int, *, extras: bool, tag: str = "",
             compiled: bool = False, report: Callable[[str], None] | None = None) -> list[PairResult]:
    """Every pair at one shape; ``extras``: the no-grad and float32 runs of our forms and the ordering checks.
    A form is run once and compared with the derivation and with each of the user's rules."""
    say = report or (lambda line: None)
    say(f"{label}: the derivation at {', '.join(f'{k}={v}' for k, v in shape.items())} ...")
    step = derived(spec)
    cases = {s: make_case(spec, **shape, seed=seed, with_state=s) for s in (True, False)}
    truth = {s: run(step, c, state_grad=s) for s, c in cases.items()}
    pairs = _pairs(spec, compiled)
    outputs = {p.name: functools.cache(functools.partial(_run_pair, p, cases[p.with_state])) for p in pairs}
    yours = [p for p in pairs if p.yours]
    checks: list[tuple[str, float, Callable[[], float], str]] = []  # (pair, tolerance, measure, expect)
    for p in pairs:
        case, want, got = cases[p.with_state], truth[p.with_state], outputs[p.name]
        checks.append((p.name + tag, p.tolerance, lambda want=want, got=got, p=p: max_abs_error(
            want, got(), p.grad_inputs), "equal"))
        if p.ours and not p.yours:  # every form of ours against each of your rules too
            checks += [(f"{r.label} vs {p.label}{tag}", EXACT_ATOL, lambda r=r, got=got, p=p: max_abs_error(
                outputs[r.name](), got(), p.grad_inputs), "equal") for r in yours]
        if extras and p.ours:
            checks += [(p.name + " [no grad]", p.tolerance, lambda want=want, case=case, p=p: max_abs_error(
                           want, run(p.fn, case, extra=p.extra, grad=False), ()), "equal"),
                       (p.name + " [float32, relative]", F32_RTOL, lambda want=want, case=case, p=p: max_abs_error(
                           want, run(p.fn, cast(case, torch.float32), extra=p.extra, state_grad=p.with_state),
                           relative=True), "equal")]
    if extras:
        checks += [(pair, 1e-3, lambda fn=fn: max_abs_error(truth[True], run(fn, cases[True])), "differ")
                   for pair, fn in _ordering_checks(spec)]
    results = []
    for i, (pair, tol, measure, expect) in enumerate(checks, 1):
        results.append(_result(label, pair, tol, measure, expect))
        r = results[-1]
        say(f"{label} [{i}/{len(checks)}] {r.pair}: {r.max_abs_error:.1e} {'pass' if r.passed else 'FAIL'}")
    return results


def _run_pair(p: Pair, case: Case) -> dict:
    return run(p.fn, case, extra=p.extra, state_grad=p.with_state)


def _result(label: str, pair: str, tol: float, measure: Callable[[], float], expect: str = "equal") -> PairResult:
    """The pair's result; ``expect="differ"``: it passes when the error is above ``tol``."""
    try:
        err = measure()
    except Exception as exc:  # a failing implementation is a failed pair, reported with its reason
        return PairResult(label, f"{pair} [error: {type(exc).__name__}: {exc}]", float("inf"), False, tol, expect)
    return PairResult(label, pair, err, err > tol if expect == "differ" else err <= tol, tol, expect)


# ----------------------------------------------------------------- backends on a device

# tolerances of ``verify_backends``, relative to each tensor's largest entry (outputs, final states, input
# gradients) against the float64 derivation: float32 as F32_RTOL but 1e-3 where FLA's Triton dots may round
# through TF32; bf16 inputs carry 8 significant bits (2^-8 = 4e-3) through sums of T terms
BACKEND_RTOL = {("torch", torch.float32): F32_RTOL, ("compiled", torch.float32): F32_RTOL,
                ("fla", torch.float32): 1e-3, ("torch", torch.bfloat16): 5e-2, ("compiled", torch.bfloat16): 5e-2,
                ("fla", torch.bfloat16): 5e-2}
LAYER_RTOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2}  # a Mixer by backend "fla" against the same by "torch"


def on_device(case: Case, device: torch.device | str, dtype: torch.dtype) -> Case:
    """``case`` in ``dtype`` on ``device`` (fresh leaves that require grad)."""
    c = cast(case, dtype)
    move = lambda t: None if t is None else t.detach().to(device)  # noqa: E731
    init = c.initial_state
    init = move(init) if init is None or torch.is_tensor(init) else tuple(move(t) for t in init)
    return Case({n: move(t).requires_grad_(True) for n, t in c.tensors.items()}, init, c.scale)


def _to_cpu64(out: dict) -> dict:
    f = lambda t: t.detach().to("cpu", torch.float64)  # noqa: E731
    return {"output": [f(t) for t in out["output"]], "state": [f(t) for t in out["state"]],
            "grad": {n: f(t) for n, t in out["grad"].items()}}


def verify_backends(spec: MixerSpec | str, device: torch.device | str = "cuda", *, env=None,
                    backends: tuple[str, ...] = ("fla", "compiled", "torch"),
                    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
                    T: int = 64, B: int = 2, H: int = 2, K: int = 16, V: int = 16, seed: int = 0) -> list[PairResult]:
    """Every backend of ``spec``'s auto form on ``device`` (mixers/kernels.py) against the float64 derivation
    on CPU, in each of ``dtypes`` (``BACKEND_RTOL``), and a Mixer run by backend "fla" against the same
    weights run by "torch" (``LAYER_RTOL``). A backend the spec's form does not have, or that FLA refuses
    on this device (``fla_status``), is left out. ``env``: FLA's availability and kernels (mixers/kernels.py
    FlaEnv; None: the machine's), so the path runs on CPU with FLA's naive references."""
    from .layer import Mixer
    from .lower import choose_backend, compilable, fla_kernel
    from .presets import get_preset

    spec = get_preset(spec) if isinstance(spec, str) else spec
    label, device = spec.name or "custom", torch.device(device)
    case = make_case(spec, B=B, T=T, H=H, K=K, V=V, seed=seed)
    truth = run(derived(spec), case)
    results = []
    for dtype in dtypes:
        for backend in backends:
            if (backend == "compiled" and not compilable(spec)) or (backend == "fla" and fla_kernel(spec)[0] is None):
                continue
            try:
                choose_backend(spec, backend=backend, device=device, dtype=dtype, env=env)
            except ValueError:  # FLA refuses on this device: `assocmem derive` says why
                continue
            form = lower(spec, backend=backend, device=device, dtype=dtype, env=env)
            tol = BACKEND_RTOL[(backend, dtype)]
            extra = {"chunk_size": 16} if form.name == "chunk" else {}
            pair = f"derived vs form:{form.name} [{backend}, {device.type}, {str(dtype).removeprefix('torch.')}]"
            results.append(_result(label, pair, tol, lambda: max_abs_error(
                truth, _to_cpu64(run(form.fn, on_device(case, device, dtype), extra=extra)), relative=True)))
        if "fla" in backends and fla_kernel(spec)[0] is not None and not isinstance(spec.memory, (Spectral,
                                                                                               NonParametric)):
            results += _layer_pair(spec, label, device, dtype, env, Mixer, seed)
    return results


def _layer_pair(spec, label, device, dtype, env, mixer_cls, seed) -> list[PairResult]:
    """The Mixer by backend "fla" against the same weights by "torch": output and input gradient."""
    from .lower import choose_backend

    try:
        choose_backend(spec, backend="fla", device=device, dtype=dtype, env=env)
    except ValueError:
        return []
    torch.manual_seed(seed)
    d_model = 2 * spec.layer.num_heads * spec.layer.head_dim
    ref = mixer_cls(spec, d_model).to(device)
    fla = mixer_cls(spec, d_model).to(device)
    fla.load_state_dict(ref.state_dict())
    ref.set_backend("torch")
    fla.set_backend("fla", env)
    x = torch.randn(2, 48, d_model, generator=torch.Generator().manual_seed(seed)).to(device)

    def measure() -> float:
        outs = []
        for m in (ref, fla):
            xi = x.clone().requires_grad_(True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                y, _ = m(xi)
            g, = torch.autograd.grad(y.float().square().sum(), xi)
            outs.append({"output": [y.detach().double().cpu()], "state": [], "grad": {"x": g.double().cpu()}})
        return max_abs_error(outs[0], outs[1], relative=True)

    pair = f"layer: backend fla vs torch [{device.type}, {str(dtype).removeprefix('torch.')}]"
    return [_result(label, pair, LAYER_RTOL[dtype], measure)]


def print_table(results: list[PairResult], out=None) -> None:
    """One line per pair: preset, pair, max abs error, tolerance, verdict (``assocmem verify``'s table)."""
    out = out or sys.stdout
    w = max(len(r.pair) for r in results)
    print(f"{'preset':22s}  {'pair':{w}s}  {'max abs error':>13s}  {'tol':>7s}  result", file=out)
    for r in results:
        verdict = ("pass" if r.passed else "FAIL") + (" (differs as expected)" if r.expect == "differ" and r.passed else "")
        print(f"{r.preset:22s}  {r.pair:{w}s}  {r.max_abs_error:13.2e}  {r.tolerance:7.0e}  {verdict}", file=out)
