"""Group-relative advantages and Nautile's "skip mastered groups" rule (``mastered_groups``).

A group is the G completions of one prompt, with rewards r [P, G]. The advantage of completion j of
prompt i (DeepSeekMath GRPO; Dr. GRPO, Liu et al. 2025, drops the division; Nautile §4.2 uses Dr. GRPO):

    A_ij = r_ij − mean_j r_ij                                  scale = "none"   (Dr. GRPO)
    A_ij = (r_ij − mean_j r_ij) / (std_j r_ij + 1e-4)          scale = "group"  (GRPO)
    A_ij = (r_ij − mean_j r_ij) / (std_{all} r + 1e-4)         scale = "batch"

std is the unbiased (Bessel-corrected) standard deviation and 1e-4 the constant TRL's GRPOTrainer
adds (trl/trainer/grpo_trainer.py, ``_generate_and_score_completions``), so the three modes equal
TRL's ``scale_rewards`` values of the same names.
"""
from __future__ import annotations

from typing import Literal

import torch

STD_EPS = 1e-4
Scale = Literal["none", "group", "batch"]


def group_advantages(rewards: torch.Tensor, scale: Scale = "none") -> torch.Tensor:
    """Advantages [P, G] of rewards [P, G] (module docstring); G >= 2."""
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [prompts, G] with G >= 2 completions per prompt, got {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)                     # [P, G]
    if scale == "none":
        return centred
    if scale == "group":
        return centred / (rewards.std(dim=1, keepdim=True) + STD_EPS)
    if scale == "batch":
        spread = rewards.std() if rewards.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
        return centred / (spread + STD_EPS)
    raise ValueError(f"unknown advantage scale {scale!r}; choose none, group or batch")


def mastered_groups(rewards: torch.Tensor, *, every_above: float, min_above: float) -> torch.Tensor:
    """bool [P]: groups in which every reward exceeds ``every_above`` and the minimum exceeds ``min_above``.

    Nautile §4.2: "Groups in which every completion receives an overall score above 90 (and a minimum
    above 85) are skipped as mastered." Every completion, not the group's mean: [86, 99, 99, 99] is
    not mastered at (90, 85). The paper's judge gives each completion several scores, so its two
    numbers may read two of them; here a completion has one reward and both thresholds read it, so
    the rule is min_j r_ij > max(every_above, min_above) and ``min_above`` binds only above
    ``every_above``. Such a group has (almost) no signal left, only KL and length terms.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [prompts, G], got {tuple(rewards.shape)}")
    lowest = rewards.min(dim=1).values                                        # [P]
    return (rewards > every_above).all(dim=1) & (lowest > min_above)
