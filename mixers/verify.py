"""verify(spec): every implementation of a spec against its derivation.

On random float64 inputs consistent with the spec's layer options (unit-norm
keys for the delta rule, Mamba2's shared Δ, RetNet's fixed γ, positive
features for a normalised read-out, ...), compare the derived recurrence (the
ground truth) with

  1. the hand-written recurrence of the published rule, where one exists (with
     recurrent depth K > 1: the hand-written unrolled K-step loop);
  2. every exact lowered form (chunk, prefix sum, SDPA, compiled scan);
  3. the external references (external.py: transformers, FLA) that are installed;

on outputs, final states and input gradients (one random cotangent), and
report the max abs error of each pair. For the Gated DeltaNet composition
order, a spec is also compared with the OTHER ordering, which must differ.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from assocmem.memories import L2Decay, Momentum, NonParametric, Spectral
from assocmem.memories.checks import gate_needs

from .external import external_references
from .lower import APPROXIMATE, FAMILIES, available_forms, derived, family_of, hand_written, lower
from .spec import MixerSpec

EXACT_ATOL = 1e-10  # float64, derived vs hand-written / lowered forms


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
    tensors = dict(q=q, k=k, v=v, **_gates(spec, rnd, B, T, H, K))
    if gate_needs(spec).removal_key:
        tensors["removal_key"] = torch.nn.functional.normalize(rnd(B, T, H, K), dim=-1)
    init = _matrix_state(spec, rnd, B, H, K, V) if with_state else None
    if isinstance(spec.memory, NonParametric) and with_state:
        init = (rnd(B, H, 3, K), rnd(B, H, 3, V))
    for t in tensors.values():
        t.requires_grad_(True)
    return Case(tensors, init, spec.layer.scale)


def _gates(spec, rnd, B, T, H, K) -> dict[str, torch.Tensor]:
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


def run(fn: Callable, case: Case, *, extra: dict | None = None, seed: int = 1) -> dict[str, list[torch.Tensor]]:
    """Output, final state (flattened) and the input gradients of a random scalar projection."""
    kw = dict(case.tensors)
    q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
    o, S = fn(q, k, v, **kw, scale=case.scale, initial_state=case.initial_state,
              output_final_state=True, **(extra or {}))
    g = torch.Generator().manual_seed(seed)
    cot = torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)  # same for every implementation
    inputs = list(case.tensors.values())
    grads = torch.autograd.grad((o * cot).sum(), inputs, allow_unused=True)
    grads = {n: torch.zeros_like(i) if gr is None else gr for n, i, gr in zip(case.tensors, inputs, grads)}
    return {"output": [o.detach()], "state": [x.detach() for x in _flat(S)], "grad": grads}


def max_abs_error(a: dict, b: dict, grad_inputs: tuple[str, ...] | None = None) -> float:
    """Max abs difference over outputs, input gradients (all, or those named) and, when
    both return one, final states."""
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
                err = max(err, float((x.to(torch.float64) - y.to(torch.float64)).abs().max()))
    return err


def _pairs(spec: MixerSpec) -> list[tuple[str, Callable, float, bool, dict, tuple | None]]:
    """(pair, fn, tolerance, supports initial state, extra kwargs, comparable gradients)."""
    pairs = []
    hw = hand_written(spec)
    if hw is not None:
        pairs.append((f"derived vs {hw[0]} (hand-written)", hw[1], EXACT_ATOL, True, {}, None))
    for name in available_forms(spec):
        if name in APPROXIMATE or name == "recurrent":
            continue  # recurrent = the hand-written one above (or derived itself)
        extra = {"chunk_size": 16} if name == "chunk" else {}
        pairs.append((f"derived vs form:{name}", lower(spec, name).fn, EXACT_ATOL, True, extra, None))
    for ref in external_references(spec):
        pairs.append((f"derived vs {ref.name}", ref.fn, ref.atol, ref.initial_state, {}, ref.grad_inputs))
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
           seed: int = 0) -> list[PairResult]:
    """Compare every implementation of ``spec`` with its derivation (float64)."""
    from .presets import get_preset

    spec = get_preset(spec) if isinstance(spec, str) else spec
    label = spec.name or "custom"
    step = derived(spec)
    cases = {s: make_case(spec, B=B, T=T, H=H, K=K, V=V, seed=seed, with_state=s) for s in (True, False)}
    truth = {s: run(step, c) for s, c in cases.items()}
    results = []
    for pair, fn, tol, with_state, extra, grads in _pairs(spec):
        try:
            err = max_abs_error(truth[with_state], run(fn, cases[with_state], extra=extra), grads)
        except Exception as exc:  # a failing implementation is a failed pair, reported with its reason
            results.append(PairResult(label, f"{pair} [error: {type(exc).__name__}: {exc}]", float("inf"), False, tol))
            continue
        results.append(PairResult(label, pair, err, err <= tol, tol))
    for pair, fn in _ordering_checks(spec):
        err = max_abs_error(truth[True], run(fn, cases[True]))
        results.append(PairResult(label, pair, err, err > 1e-3, 1e-3, expect="differ"))
    return results
