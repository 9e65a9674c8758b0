"""The GRPO family of policy losses: clipped ratio, k3 KL to a frozen reference, four aggregations.

Per completion i (advantage A_i) and response token t (mask m_it):

  1. ratio       ρ_it = exp(log π_θ(y_it) − log π_old(y_it))         (= 1 with one inner iteration)
  2. surrogate   ℓ_it = −min(ρ_it A_i, clip(ρ_it, 1 − ε_low, 1 + ε_high) A_i)      (PPO; DAPO's ε_low/ε_high)
  3. KL (k3)     k_it = exp(r_it − log π_θ) − (r_it − log π_θ) − 1,   r_it = log π_ref(y_it)
                 (Schulman's unbiased, non-negative estimator of KL(π_θ ‖ π_ref))
                 kl_bias_correction: k_it ← ρ_it k_it (DeepSeek-V3.2; TRL's ``use_bias_correction_kl``):
                 the KL gradient becomes the unbiased reverse-KL gradient; ρ = 1 on-policy, but its
                 gradient ∇ρ = ∇log π_θ is not 0, so the gradient changes there too
  4. per token   L_it = ℓ_it + β k_it
  5. loss        L = Σ_it w_it m_it L_it   with the weights w of the aggregation (``AGGREGATIONS``)

The aggregations are TRL's ``GRPOTrainer`` loss types (trl 1.16.0, grpo_trainer.py ``_compute_loss``),
and the loss equals TRL's with ``importance_sampling_level="token"``, ``delta=None`` and
``use_bias_correction_kl`` equal to ``kl_bias_correction`` (TRL's default is True, ours False):

    grpo     mean over sequences of the per-sequence token mean     w_it = 1 / (B · max(n_i, 1))
    bnpo     mean over the active tokens of the local batch         w_it = 1 / (W · n_local)
    dr_grpo  a constant: B · max_completion_length                  w_it = 1 / (B · T_max)
    dapo     mean over the active tokens of the global batch        w_it = 1 / n_global

with n_i the active tokens of sequence i, B the global number of sequences, W the number of
processes. Written as weights, each process's loss is its share of the global loss: the sum over
processes of the local losses is the loss one process would compute on the whole batch (bnpo is
the exception by definition: TRL normalises it by the local token count and averages processes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch

Aggregation = Literal["grpo", "bnpo", "dr_grpo", "dapo"]


@dataclass(frozen=True)
class BatchCounts:
    """The global sizes an aggregation divides by (all-reduced over processes).

    sequences: B, completions in the global batch; tokens: active response tokens in it;
    max_len: T_max, the longest response allowed (the sampler's max_new_tokens); world_size: W.
    """

    sequences: int
    tokens: int
    max_len: int
    world_size: int = 1


def _grpo(mask: torch.Tensor, n: BatchCounts) -> torch.Tensor:
    return mask / (mask.sum(-1, keepdim=True).clamp(min=1.0) * n.sequences)


def _bnpo(mask: torch.Tensor, n: BatchCounts) -> torch.Tensor:
    return mask / (mask.sum().clamp(min=1.0) * n.world_size)


def _dr_grpo(mask: torch.Tensor, n: BatchCounts) -> torch.Tensor:
    return mask / (n.sequences * n.max_len)


def _dapo(mask: torch.Tensor, n: BatchCounts) -> torch.Tensor:
    return mask / max(n.tokens, 1)


AGGREGATIONS: dict[str, Callable[[torch.Tensor, BatchCounts], torch.Tensor]] = {
    "grpo": _grpo, "bnpo": _bnpo, "dr_grpo": _dr_grpo, "dapo": _dapo}


def token_weights(mask: torch.Tensor, aggregation: str, counts: BatchCounts) -> torch.Tensor:
    """w_it · m_it [B_local, T] of step 5 (module docstring); mask [B_local, T] of 0/1 in the loss dtype."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose one of {list(AGGREGATIONS)}")
    return AGGREGATIONS[aggregation](mask, counts)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Step 3: exp(ref − logp) − (ref − logp) − 1, elementwise [B, T]."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, *, eps_low: float,
                      eps_high: float) -> torch.Tensor:
    """Steps 1-2: ℓ [B, T] from log-probs [B, T] (old ones detached by the caller) and advantages [B]."""
    ratio = torch.exp(logp - old_logp)                                     # [B, T]
    adv = advantages[:, None]                                              # [B, 1]
    return -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)


@dataclass(frozen=True)
class LossTerms:
    """The loss split by where its gradient comes from (``balancing.py`` needs them apart).

    positive: Σ w m ℓ over completions with A > 0; negative: over A < 0 (A = 0 adds nothing);
    kl: β Σ w m k. ``total`` is the loss of steps 1-5. positive_rows, negative_rows [B]: the same
    sums per completion (``by_group`` adds them per prompt).
    """

    positive: torch.Tensor
    negative: torch.Tensor
    kl: torch.Tensor
    positive_rows: torch.Tensor
    negative_rows: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.positive + self.negative + self.kl

    def by_group(self, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(positive, negative) per prompt [P]: rows are P groups of ``group_size`` completions, in order."""
        rows = self.positive_rows.shape[0]
        if rows % group_size:
            raise ValueError(f"{rows} completions do not split into groups of {group_size}")
        return (self.positive_rows.view(-1, group_size).sum(1), self.negative_rows.view(-1, group_size).sum(1))


def policy_loss_terms(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                      advantages: torch.Tensor, mask: torch.Tensor, *, aggregation: str, counts: BatchCounts,
                      beta: float, eps_low: float, eps_high: float, kl_bias_correction: bool = False) -> LossTerms:
    """The three terms of this process's share of the loss (module docstring), each a scalar.

    logp, old_logp, ref_logp, mask: [B_local, T]; advantages: [B_local]. ``ref_logp`` may be None
    only with beta = 0. ``kl_bias_correction``: the KL per token times the ratio (step 3).
    """
    weights = token_weights(mask.to(logp.dtype), aggregation, counts)       # [B, T]
    surrogate = clipped_surrogate(logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high) * weights
    positive = (advantages > 0).to(logp.dtype)[:, None]
    negative = (advantages < 0).to(logp.dtype)[:, None]
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs the reference model's log-probabilities")
        per_token = k3_kl(logp, ref_logp)                                   # [B, T]
        if kl_bias_correction:
            per_token = per_token * torch.exp(logp - old_logp)
        kl = beta * (per_token * weights).sum()
    else:
        kl = logp.new_zeros(())
    return LossTerms(positive=(surrogate * positive).sum(), negative=(surrogate * negative).sum(), kl=kl,
                     positive_rows=(surrogate * positive).sum(-1), negative_rows=(surrogate * negative).sum(-1))
