"""Gradient-balanced GRPO (Nautile-370M §4.3): the negative-advantage gradient rescaled to the norm
of the positive one.

    g⁺ = ∇ L⁺   (completions with A > 0)      g⁻ = ∇ L⁻   (completions with A < 0)
    g  = g⁺ + s · g⁻ + ∇ L_KL,                s = ‖g⁺‖ / (‖g⁻‖ + ε)          (Nautile §4.3; cap: min(1, s))

Nautile writes g± = Σ A_i ∇ log π(y_i | x) over the two signs; here they are the gradients of the
two sign-parts of the GRPO-family loss (losses.py: ``LossTerms``), which with one inner iteration
and the ratio at 1 are those sums up to the aggregation's weights. The KL gradient is added
unscaled. As written, the rule also scales g⁻ *up* when it is the smaller one; ``cap`` keeps
s ≤ 1 so it only ever shrinks g⁻. Norms are global (all parameters) and taken after the gradients
are summed over processes, so every process computes the same s.

``split_gradients`` takes the parts' gradients with one forward and one backward per part
(``retain_graph``); ``combine`` forms g.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

Reduce = Callable[[torch.Tensor], torch.Tensor]  # sums a flat gradient over processes


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def flat_gradient(loss: torch.Tensor, params: Sequence[torch.Tensor], *, retain_graph: bool,
                  reduce: Reduce = _identity) -> torch.Tensor:
    """∇loss over ``params`` as one flat vector (zeros where a parameter is not reached), summed over
    processes by ``reduce``."""
    if not loss.requires_grad:
        return reduce(torch.cat([torch.zeros(p.numel(), dtype=p.dtype, device=p.device) for p in params]))
    grads = torch.autograd.grad(loss, list(params), retain_graph=retain_graph, allow_unused=True)
    flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])
    return reduce(flat)


def split_gradients(parts: Sequence[torch.Tensor], params: Sequence[torch.Tensor], *,
                    reduce: Reduce = _identity) -> list[torch.Tensor]:
    """The flat gradient of each part, in order (the graph is kept until the last part)."""
    return [flat_gradient(part, params, retain_graph=i < len(parts) - 1, reduce=reduce)
            for i, part in enumerate(parts)]


@dataclass(frozen=True)
class Balanced:
    """g (flat) and what the rule saw: ‖g⁺‖, ‖g⁻‖ and the scale s applied to g⁻."""

    gradient: torch.Tensor
    norm_positive: float
    norm_negative: float
    scale: float


def combine(g_pos: torch.Tensor, g_neg: torch.Tensor, g_kl: torch.Tensor, *, eps: float, cap: bool) -> Balanced:
    """g = g⁺ + s g⁻ + g_KL with s = ‖g⁺‖ / (‖g⁻‖ + ε), min(1, s) under ``cap`` (module docstring)."""
    norm_pos, norm_neg = torch.linalg.vector_norm(g_pos), torch.linalg.vector_norm(g_neg)
    scale = norm_pos / (norm_neg + eps)
    if cap:
        scale = torch.clamp(scale, max=1.0)
    return Balanced(gradient=g_pos + scale * g_neg + g_kl, norm_positive=float(norm_pos),
                    norm_negative=float(norm_neg), scale=float(scale))


def assign_gradient(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write a flat gradient into ``p.grad`` of each parameter (the optimizer then steps on it)."""
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat gradient has {flat.numel()} entries, the parameters {offset}")
