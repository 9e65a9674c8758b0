"""Scored on-policy self-distillation (Nautile-370M §4.4).

Per round: sample G completions per prompt from the current policy, score them, compute the Dr. GRPO
advantage A = r − mean (no std division), keep the completions with A > 0, and fine-tune on them for
E epochs with a token cross-entropy; then resample. Two weightings:

    advantage   L = Σ_{i: A_i > 0} A_i Σ_t w_it m_it (−log π_θ(y_it))     w: the aggregation's weights over
                                                                        the whole sampled batch (losses.py)
    none        L = Σ_{i kept} Σ_t m_it (−log π_θ(y_it)) / Σ_{i kept} Σ_t m_it     (plain CE on the kept set)

With the advantage weighting the gradient is that of the positive part of the GRPO-family loss with
β = 0 and one inner iteration (ρ = 1, so the clip is inactive and ∇ℓ = −A ∇log π): the stage is
"GRPO that never pushes down" — what the paper argues it buys (§4.4: no gradient-balance issue).
"""
from __future__ import annotations

from typing import Literal

import torch

from .losses import BatchCounts, token_weights

Weighting = Literal["advantage", "none"]


def kept_completions(advantages: torch.Tensor) -> torch.Tensor:
    """bool [B]: the completions self-distillation trains on (A > 0)."""
    return advantages > 0


def self_distillation_loss(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *, weighting: str,
                           aggregation: str, counts: BatchCounts, kept_tokens: int) -> torch.Tensor:
    """This process's share of L (module docstring).

    logp, mask: [B_local, T]; advantages: [B_local]; ``counts`` the global sizes of the sampled
    batch (for the advantage weighting); ``kept_tokens`` the global Σ m over kept completions (for
    the plain CE).
    """
    mask = mask.to(logp.dtype)
    keep = kept_completions(advantages).to(logp.dtype)[:, None]                  # [B, 1]
    if weighting == "advantage":
        weights = token_weights(mask, aggregation, counts) * advantages[:, None]  # [B, T]
        return -(weights * keep * logp).sum()
    if weighting == "none":
        return -(mask * keep * logp).sum() / max(kept_tokens, 1)
    raise ValueError(f"unknown self-distillation weighting {weighting!r}; choose advantage or none")
