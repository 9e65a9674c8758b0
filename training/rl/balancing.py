"""Gradient-balanced GRPO (Nautile-370M §4.3): the negative-advantage gradient rescaled to the norm
of the positive one.

Nautile §4.3: "we decouple the positive and negative components of the policy gradient and normalize
their magnitudes independently: g⁺ = Σ_{i: A_i>0} A_i ∇_θ log π_θ(y_i | x), g⁻ = Σ_{i: A_i<0} A_i ∇_θ log
π_θ(y_i | x), g = g⁺ + ‖g⁺‖/(‖g⁻‖+ε) g⁻. This ensures that the destructive gradient component never
dominates the constructive one, regardless of the proportion of correct completions in the group."
The sums run over the completions i of one prompt x (its group), so the literal reading balances each
prompt on its own; one scale for the whole round is the other reading. ``balance`` picks one:

    prompt (default)  g = Σ_x (g⁺_x + s_x · g⁻_x) + ∇ L_KL,   s_x = ‖g⁺_x‖ / (‖g⁻_x‖ + ε)
    batch             g = g⁺ + s · g⁻ + ∇ L_KL,               s = ‖g⁺‖ / (‖g⁻‖ + ε),  g± = Σ_x g±_x

    g±_x = ∇ L±_x   the gradient of prompt x's completions with A > 0 (A < 0) in the loss
    cap: min(1, s) (and min(1, s_x)), so g⁻ is only ever shrunk

Here g±_x are the gradients of the sign-parts of the GRPO-family loss restricted to prompt x's rows
(losses.py: ``LossTerms.by_group``), which with one inner iteration and the ratio at 1 are the paper's
sums up to the aggregation's weights (a factor common to g⁺_x and g⁻_x under dapo, bnpo and dr_grpo,
so s_x is unchanged by it). The KL gradient is added unscaled. As written, the rule also scales g⁻ *up* when
it is the smaller one; ``cap`` keeps s ≤ 1. A prompt's completions all live on one process, so s_x
is local; the sums, and the norms of ``batch``, are taken after the gradients are summed over
processes, so every process computes the same g. ``prompt`` costs one backward per prompt and sign
(2P + 1 per inner iteration, against 3 for ``batch``).

``split_gradients`` takes the parts' gradients with one forward and one backward per part
(``retain_graph``); ``combine`` forms g of ``batch``, ``balance_per_prompt`` that of ``prompt``.
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
    """g (flat) and what the rule saw: g⁺ and g⁻ summed over the round, their norms, and the scale of g⁻
    (``batch``: s; ``prompt``: ‖Σ_x s_x g⁻_x‖ / ‖Σ_x g⁻_x‖, the factor the round's g⁻ was scaled by, 0
    when it has none)."""

    gradient: torch.Tensor
    positive: torch.Tensor
    negative: torch.Tensor
    norm_positive: float
    norm_negative: float
    scale: float


def _scale(g_pos: torch.Tensor, g_neg: torch.Tensor, *, eps: float, cap: bool) -> torch.Tensor:
    """s = ‖g⁺‖ / (‖g⁻‖ + ε), min(1, s) under ``cap``."""
    scale = torch.linalg.vector_norm(g_pos) / (torch.linalg.vector_norm(g_neg) + eps)
    return torch.clamp(scale, max=1.0) if cap else scale


def combine(g_pos: torch.Tensor, g_neg: torch.Tensor, g_kl: torch.Tensor, *, eps: float, cap: bool) -> Balanced:
    """``balance: batch``: g = g⁺ + s g⁻ + g_KL with s = ‖g⁺‖ / (‖g⁻‖ + ε), min(1, s) under ``cap``."""
    scale = _scale(g_pos, g_neg, eps=eps, cap=cap)
    return Balanced(gradient=g_pos + scale * g_neg + g_kl, positive=g_pos, negative=g_neg,
                    norm_positive=float(torch.linalg.vector_norm(g_pos)),
                    norm_negative=float(torch.linalg.vector_norm(g_neg)), scale=float(scale))


def balance_per_prompt(positives: Sequence[torch.Tensor], negatives: Sequence[torch.Tensor], kl: torch.Tensor,
                       params: Sequence[torch.Tensor], *, eps: float, cap: bool,
                       reduce: Reduce = _identity) -> Balanced:
    """``balance: prompt``: g = Σ_x (g⁺_x + s_x g⁻_x) + g_KL from this process's per-prompt loss parts
    (scalars L⁺_x, L⁻_x, one pair per local prompt) and its KL part; the sums are reduced over processes.

    One backward per part, accumulated as it goes (memory: four flat gradients, not 2P).
    """
    if len(positives) != len(negatives):
        raise ValueError(f"{len(positives)} positive parts but {len(negatives)} negative parts: one of each per prompt")
    size = sum(p.numel() for p in params)
    like = params[0] if params else torch.zeros(())
    pos_sum, neg_sum, neg_scaled = (torch.zeros(size, dtype=like.dtype, device=like.device) for _ in range(3))
    for part_pos, part_neg in zip(positives, negatives):
        g_pos = flat_gradient(part_pos, params, retain_graph=True)
        g_neg = flat_gradient(part_neg, params, retain_graph=True)
        pos_sum += g_pos
        neg_sum += g_neg
        neg_scaled += _scale(g_pos, g_neg, eps=eps, cap=cap) * g_neg
    g_kl = flat_gradient(kl, params, retain_graph=False)
    pos_sum, neg_sum, neg_scaled, g_kl = reduce(torch.cat([pos_sum, neg_sum, neg_scaled, g_kl])).split(size)
    norm_neg = float(torch.linalg.vector_norm(neg_sum))
    return Balanced(gradient=pos_sum + neg_scaled + g_kl, positive=pos_sum, negative=neg_sum,
                    norm_positive=float(torch.linalg.vector_norm(pos_sum)), norm_negative=norm_neg,
                    scale=float(torch.linalg.vector_norm(neg_scaled)) / norm_neg if norm_neg > 0 else 0.0)


def assign_gradient(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write a flat gradient into ``p.grad`` of each parameter (the optimizer then steps on it)."""
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat gradient has {flat.numel()} entries, the parameters {offset}")
