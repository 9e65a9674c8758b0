"""Weight-mapped layer comparisons: run a published layer and ours on the same input and cotangent."""
from __future__ import annotations

import torch
import torch.nn as nn

from assocmem.mixers.convert import CONVERTERS, spec_from_hf


def randomize_(module: nn.Module, seed: int, std: float = 0.3) -> nn.Module:
    """Every parameter drawn N(0, std²) (norm weights 1 + N(0, std²)), so that no mapping error can hide
    behind an init of ones or zeros."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * std
            p.copy_(noise + 1 if "norm" in name else noise)
    return module


def outputs_and_grads(call, module: nn.Module, x: torch.Tensor, cot: torch.Tensor) -> dict[str, torch.Tensor]:
    """y = call(x), and the gradients of ⟨y, cot⟩ with respect to x and every parameter of ``module``."""
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    y = call(x)
    (y * cot).sum().backward()
    out = {"output": y.detach(), "grad:x": x.grad}
    out.update({f"grad:{n}": p.grad for n, p in module.named_parameters()})
    return out


def compare(ref: nn.Module, ref_call, ours: nn.Module, ours_call, x: torch.Tensor, seed: int = 1, *,
            relative: bool = False) -> dict[str, float]:
    """Max abs errors of output, input gradient and every parameter gradient (ours mapped to the reference's
    names by the family's converter), for layers [B, T, d] -> [B, T, d] and one random cotangent.
    relative=True divides each by the reference's max abs value (float32 runs: gradients summed over
    B·T tokens reach O(100))."""
    cot = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(x.dtype)
    a = outputs_and_grads(ref_call, ref, x, cot)
    b = outputs_and_grads(ours_call, ours, x, cot)
    conv = CONVERTERS[type(ref).__name__]
    spec, _ = spec_from_hf(ref)
    mapped = conv.to_hf({k[5:]: v for k, v in b.items() if k.startswith("grad:") and k != "grad:x"}, spec)
    b = {"output": b["output"], "grad:x": b["grad:x"], **{f"grad:{k}": v for k, v in mapped.items()}}
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    scale = {k: float(a[k].abs().max()) if relative else 1.0 for k in a}
    return {k: float((a[k].double() - b[k].double()).abs().max()) / scale[k] for k in a}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())
