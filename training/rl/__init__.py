"""Reinforcement learning after SFT: the GRPO family, gradient-balanced GRPO (Nautile-370M §4.3) and
scored on-policy self-distillation (§4.4).

    advantages.py         group-relative advantages (Dr. GRPO / GRPO / batch scale), Nautile's mastered-group rule
    losses.py             clipped ratio, k3 KL, the aggregations grpo / bnpo / dr_grpo / dapo (TRL's definitions)
    balancing.py          g = g⁺ + ‖g⁺‖/(‖g⁻‖+ε)·g⁻ from per-part gradients, optional cap
    self_distillation.py  keep A > 0, advantage-weighted (or plain) token cross-entropy
"""
