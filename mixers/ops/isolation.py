"""Causal isolation of non-finite inputs in the parallel forms (chunkwise and SDPA).

The recurrent forms are causal for any input: o_t depends on the inputs at positions
≤ t only, so a NaN or ±inf entering at position p leaves every o_t, t < p, as it was.
The parallel forms reach the same outputs through products with structurally zero
weights — (P ⊙ causal mask) U and T R in the chunkwise forms, softmax(S + mask) V in
SDPA — and in a product 0 · NaN = NaN: a non-finite key, value, gate or step size at
p would reach every output of its chunk (chunk forms) or of the sequence (SDPA).
Masking with ``where`` cannot help inside a matrix product, so the rule is applied
after the product, in one place for every parallel form:

1. ``spread_possible``: a non-finite value may have spread backwards only if it entered
   the memory, i.e. the final state is not finite (chunk forms), or a key or value is
   not finite (SDPA). Queries never spread: row t of every product reads q_t only.
   Cost: one ``isfinite`` over the [B, H, K, V] state, or over k and v, per call.
2. ``first_non_finite``: p, the first position holding a non-finite input (all inputs
   with a time axis, batch elements together).
3. ``keep_finite_prefix``: the outputs at t < p are computed again from the inputs at
   positions < p alone (with the same initial state), so they are exactly those of the
   finite prefix, as in the recurrence; outputs at t ≥ p stay those of the full call.

Steps 2-3 run only when a non-finite value is present. The final state returned is
the full call's (non-finite). When the initial state itself is not finite nothing
is isolated: every output depends on it.
"""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["spread_possible", "first_non_finite", "keep_finite_prefix"]


def spread_possible(*tensors: torch.Tensor | None) -> bool:
    """True if any of the tensors holds NaN or ±inf (None entries and meta tensors, which hold no values, are skipped)."""
    return any(t is not None and t.device.type != "meta" and not bool(torch.isfinite(t).all()) for t in tensors)


def first_non_finite(*xs: torch.Tensor | None) -> int | None:
    """The first position t (dim 1 of [B, T, ...] tensors) where any of ``xs`` holds NaN or ±inf, or None."""
    first = None
    for x in xs:
        if x is None:
            continue
        bad = ~torch.isfinite(x).transpose(0, 1).reshape(x.shape[1], -1).all(-1)  # (T,)
        hits = torch.nonzero(bad)
        if hits.numel():
            first = int(hits[0]) if first is None else min(first, int(hits[0]))
    return first


def keep_finite_prefix(o: torch.Tensor, p: int | None, prefix: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """o [B, T, ...] with o[:, :p] replaced by ``prefix(p)``, the outputs of the inputs before p alone.

    p None (no non-finite input) or 0 (nothing before it): o unchanged.
    """
    if not p:
        return o
    return torch.cat([prefix(p), o[:, p:]], dim=1)
