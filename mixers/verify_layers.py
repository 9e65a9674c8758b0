"""verify_layers(): each preset layer against the published layer it names, weight for weight.

For every ``LayerCase`` (mixers/convert/cases.py) whose transformers module is installed, a
reference layer with random weights is mapped onto ours with ``from_hf`` and both are run on the
same input and cotangent. Four pairs per case:

  1. float64: output, input gradient and every parameter gradient (ours mapped to the reference's
     names by the converter), the reference re-typed to float64 (mixers/retype.py); ≤ 1e-10.
  2. float32: the same against the reference as published, each tensor's max error relative to its
     largest entry; ≤ 2e-5.
  3. decode: prefill, then one token at a time through the reference's own cache and our state;
     outputs and the final decode state (float64, re-typed); ≤ 1e-10.
  4. weights: ``to_hf(from_hf(m))`` gives back m's tensors bit for bit; 0.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from .convert import CONVERTERS, from_hf, spec_from_hf, to_hf
from .convert.cases import LAYER_CASES, LayerCase, Reference
from .retype import float64_retyped
from .verify import EXACT_ATOL, PairResult

F32_RTOL = 2e-5  # float32 layer vs the published float32 layer, relative to each tensor's largest entry: measured
# <= 7.5e-6 on transformers >= 5.17, 1.4e-5 on 5.4 (before 5.20 its gated-delta chunk form builds the decay
# mask with .float())


def available_cases(presets: list[str] | None = None) -> list[LayerCase]:
    """The cases the installed transformers can run (LayerCase.unavailable), whose preset is in
    ``presets`` if given."""
    return [case for case in LAYER_CASES.values()
            if (presets is None or case.preset in presets) and case.unavailable() is None]


def verify_layers(presets: list[str] | None = None, *, B: int = 2, T: int = 37, seed: int = 0,
                  report: Callable[[str], None] | None = None) -> list[PairResult]:
    """The four pairs of every available case (see the module docstring); ``report``: called with one line
    of progress as each pair ends."""
    results = []
    checks = [(case, check) for case in available_cases(presets) for check in (_float64, _float32, _decode,
                                                                                 _round_trip)]
    for i, (case, check) in enumerate(checks, 1):
        pair, err, tol = check(case, B, T, seed)
        results.append(PairResult(case.preset, f"layer vs transformers {case.name}: {pair}", err, err <= tol, tol))
        if report is not None:
            report(f"{case.preset} [{i}/{len(checks)}] {results[-1].pair}: {err:.1e} "
                   f"{'pass' if err <= tol else 'FAIL'}")
    return results


# ------------------------------------------------------------------ the four checks


def build_reference(case: LayerCase, dtype: torch.dtype, seed: int) -> Reference:
    """The case's reference layer with random weights (built re-typed when dtype is float64)."""
    if dtype != torch.float64:
        return case.build(dtype, seed)
    with float64_retyped(case.module()):
        return case.build(dtype, seed)


def _input(B: int, T: int, dtype: torch.dtype, seed: int, d: int) -> torch.Tensor:
    return torch.randn(B, T, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64).to(dtype)


def _float64(case: LayerCase, B: int, T: int, seed: int):
    ref = build_reference(case, torch.float64, seed)
    ours = from_hf(ref.layer)
    x = _input(B, T, torch.float64, seed, spec_from_hf(ref.layer)[1])
    with float64_retyped(case.module()):
        errors = compare(ref.layer, lambda t: ref.run(t, 0, None), ours, x, seed=seed)
    return "float64 output, input and parameter gradients", max(errors.values()), EXACT_ATOL


def _float32(case: LayerCase, B: int, T: int, seed: int):
    ref = build_reference(case, torch.float32, seed)
    ours = from_hf(ref.layer)
    x = _input(B, T, torch.float32, seed, spec_from_hf(ref.layer)[1])
    errors = compare(ref.layer, lambda t: ref.run(t, 0, None), ours, x, seed=seed, relative=True)
    return "float32 (as published) output and gradients, relative", max(errors.values()), F32_RTOL


def _decode(case: LayerCase, B: int, T: int, seed: int):
    ref = build_reference(case, torch.float64, seed)
    ours = from_hf(ref.layer)
    x = _input(B, T, torch.float64, seed, spec_from_hf(ref.layer)[1])
    prefill = T - 5
    with float64_retyped(case.module()), torch.no_grad():
        cache = ref.new_cache(x)
        theirs = [ref.run(x[:, :prefill], 0, cache)] + [ref.run(x[:, t:t + 1], t, cache) for t in range(prefill, T)]
        y, state = ours(x[:, :prefill])
        mine = [y]
        for t in range(prefill, T):
            y, state = ours(x[:, t:t + 1], state=state)
            mine.append(y)
    err = _max_error(torch.cat(mine, 1), torch.cat(theirs, 1))
    for _, a, b in ref.states(cache, state):
        err = max(err, _max_error(a, b))
    return f"prefill {prefill} + decode 5 vs its cache, outputs and state", err, EXACT_ATOL


def _round_trip(case: LayerCase, B: int, T: int, seed: int):
    ref = build_reference(case, torch.float64, seed)
    back = to_hf(from_hf(ref.layer), build_reference(case, torch.float64, seed + 7).layer)
    mine, theirs = back.state_dict(), ref.layer.state_dict()
    err = max(_max_error(mine[k], v) for k, v in theirs.items()) if mine.keys() == theirs.keys() else float("inf")
    return "weights to_hf(from_hf(m)) == m", err, 0.0


# ------------------------------------------------------------------ comparing two layers


def _max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def outputs_and_grads(call, module: nn.Module, x: torch.Tensor, cot: torch.Tensor) -> dict[str, torch.Tensor]:
    """y = call(x) and the gradients of ⟨y, cot⟩ with respect to x and every parameter of ``module``."""
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    y = call(x)
    (y * cot).sum().backward()
    out = {"output": y.detach(), "grad:x": x.grad}
    out.update({f"grad:{n}": p.grad for n, p in module.named_parameters()})
    return out


def compare(ref: nn.Module, ref_call, ours: nn.Module, x: torch.Tensor, *, seed: int = 0,
            relative: bool = False) -> dict[str, float]:
    """Max abs error of the output, the input gradient and every parameter gradient (ours mapped to the
    reference's parameter names by its converter) of layers [B, T, d] -> [B, T, d], for one random
    cotangent; ``relative`` divides each by the reference tensor's largest entry."""
    cot = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 2), dtype=torch.float64).to(x.dtype)
    theirs = outputs_and_grads(ref_call, ref, x, cot)
    mine = outputs_and_grads(lambda t: ours(t)[0], ours, x, cot)
    grads = {k[len("grad:"):]: v for k, v in mine.items() if k.startswith("grad:") and k != "grad:x"}
    mapped = CONVERTERS[type(ref).__name__].to_hf(grads, spec_from_hf(ref)[0])
    mine = {"output": mine["output"], "grad:x": mine["grad:x"], **{f"grad:{k}": v for k, v in mapped.items()}}
    if mine.keys() != theirs.keys():
        raise ValueError(f"gradients of different parameters: {sorted(mine)} vs {sorted(theirs)}")
    return {k: _max_error(mine[k], v) / (float(v.abs().max()) if relative else 1.0) for k, v in theirs.items()}
