"""Reinforcement learning after SFT: the GRPO family, gradient-balanced GRPO (Nautile-370M §4.3) and
scored on-policy self-distillation (§4.4), behind ``assocmem rl CONFIG.yaml``.

    config.py             RLConfig (pydantic, YAML): model, reference, data, rollout, loss, optim, train
    rewards.py            rewards by registered name (REWARDS, register_reward), checked shape and finiteness
    rollouts.py           G completions per prompt through generate() with the cache, rewards, advantages
    advantages.py         group-relative advantages (Dr. GRPO / GRPO / batch scale), Nautile's mastered-group rule
    losses.py             clipped ratio, k3 KL, the aggregations grpo / bnpo / dr_grpo / dapo (TRL's definitions)
    balancing.py          g = g⁺ + ‖g⁺‖/(‖g⁻‖+ε)·g⁻ from per-part gradients, optional cap
    self_distillation.py  keep A > 0, advantage-weighted (or plain) token cross-entropy
    reference.py          the frozen KL reference: loading, same-architecture check, weights digest
    loop.py               train_rl(cfg): rounds of sampling and updates, one process or torchrun; checkpoints
    runfolder.py          the run-folder contract with an RLConfig; curves.py the PNG (the parser: cli/rl.py)
"""
from .config import RLConfig, load_rl_config
from .rewards import REWARDS, register_reward

__all__ = ["RLConfig", "load_rl_config", "REWARDS", "register_reward"]
