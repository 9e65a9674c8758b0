"""Log-decay helpers of the chunkwise forms (``hebbian.py``, ``delta_chunk.py``).

Gates arrive as log α ≤ 0 per token (scalar per head or one per key). Two facts the chunk
forms rely on:

1. Underflow floor. e^{log α} is exactly 0 in a dtype once log α is below
   ``underflow_floor(dtype)`` (one below log of half the smallest subnormal: −104.97 in
   float32, −746.13 in float64). ``floor_log_decay`` raises such log α to the floor: every α
   is unchanged (still exactly 0) and so is every gradient (e^{log α} = 0 there too), but
   every cumulative sum over a chunk of C tokens stays within C·|floor|, and log α = −inf
   (α = 0 exactly) becomes a finite number, so no −inf − (−inf) = NaN arises in a difference
   of prefix sums.
2. Segment sums. The pairwise decay e^{Σ_{j<s≤i} log α_s} inside a chunk is a difference of
   prefix sums; taken in float32 it carries an absolute error ~|prefix|·eps, large when
   strong decay precedes weak decay (relative error 1.5e-2 at log α down to −1e6 before this
   was fixed). ``segment_sums`` takes the prefix sums and their differences in float64 and
   rounds once, so each exponent is accurate relative to its own size. Inside a compiled
   chunk form it runs eagerly (``compiled.island``): its forward writes the float64
   differences straight into the compute dtype and its backward is written by hand, where
   inductor's trace of the two took longer (measured on the GDN chunk form, T=2048, one
   thread: a 7.7 ms generated backward kernel; fwd+bwd 0.73x the eager form traced, 0.96x
   with this island).
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from .compiled import island
from .contract import autocast_off

__all__ = ["underflow_floor", "floor_log_decay", "segment_sums"]


def underflow_floor(dtype: torch.dtype) -> float:
    """A log α below which e^{log α} is exactly 0 in ``dtype``: log(smallest subnormal / 2) − 1."""
    info = torch.finfo(dtype)  # smallest subnormal = smallest_normal · eps
    return math.log(info.smallest_normal) + math.log(info.eps) - math.log(2.0) - 1.0


def floor_log_decay(log_alpha: torch.Tensor | None) -> torch.Tensor | None:
    """log α raised to ``underflow_floor`` of its dtype (same α, same gradients; see the module docstring)."""
    if log_alpha is None:
        return None
    return log_alpha.clamp(min=underflow_floor(log_alpha.dtype))


class _SegmentSums(torch.autograd.Function):
    """Segment sums [..., C] -> [..., C, C]: [i, j] = Σ_{j<s≤i} la_s for i ≥ j, 0 above the diagonal.

    Forward: differences of prefix sums taken in float64 (for float32 or narrower la) and
    rounded once. The float64 prefix sums carry an absolute error ~|Σ la|·1e-16, far below
    the float32 rounding of the segment sum itself, so each entry is accurate relative to its
    own size (as a masked cumsum would be), at the cost of one [C, C] pass written straight in
    la's dtype. float64 la: the plain difference, exponent error ~|Σ la|·eps64.
    Backward, from g_i − g_j with g = cumsum(la): dg = rowsum − colsum of the lower triangle
    of the incoming gradient, dla = suffix sums of dg (no [C, C] float64 tensor is kept).
    """

    @staticmethod
    def forward(ctx, la):
        wide = torch.float64 if la.dtype != torch.float64 else la.dtype
        g = la.to(wide).cumsum(-1)  # (..., C) prefix sums, inclusive
        out = la.new_empty(*la.shape, la.shape[-1])
        torch.sub(g[..., :, None], g[..., None, :], out=out)  # computed in float64, stored in la's dtype
        return out.tril_()  # the upper triangle (future) becomes e^0, masked by the caller

    @staticmethod
    @once_differentiable
    @autocast_off
    def backward(ctx, grad):
        lower = grad.tril()  # (..., C, C)
        dg = lower.sum(-1) - lower.sum(-2)  # ∂/∂g_i of Σ_ij G_ij (g_i − g_j)
        return dg.flip(-1).cumsum(-1).flip(-1)  # dla_s = Σ_{t≥s} dg_t


@island
def segment_sums(la: torch.Tensor) -> torch.Tensor:
    """[..., C] -> [..., C, C]: Σ_{j<s≤i} la_s at [i, j] for i ≥ j (0 above), from float64 prefix sums
    (eager also inside a compiled form: module docstring, 2)."""
    return _SegmentSums.apply(la)
