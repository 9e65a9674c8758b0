"""AdamW with decoupled weight decay on matrices, linear warm-up and cosine decay.

Learning rate at optimizer step s (0-indexed) of S steps, warm-up W, floor r:

    lr(s) = lr · (s + 1) / W                                      for s < W
    lr(s) = lr · (r + (1 − r) · ½ (1 + cos(π (s − W) / (S − W))))  otherwise

Weight decay applies to parameters with >= 2 dimensions (projections and
embeddings), not to gains and biases (nanoGPT's rule).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import OptimConfig


def lr_factor(step: int, *, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosine:
    """The schedule as a callable object, so LambdaLR's state_dict stores its three numbers."""

    def __init__(self, total_steps: int, warmup_steps: int, min_lr_ratio: float):
        self.total_steps, self.warmup_steps, self.min_lr_ratio = total_steps, warmup_steps, min_lr_ratio

    def __call__(self, step: int) -> float:
        return lr_factor(step, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                         min_lr_ratio=self.min_lr_ratio)


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW with two groups: decayed matrices and undecayed vectors (each parameter once)."""
    seen: set[int] = set()
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:  # tied weights appear once
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int):
    """LambdaLR over WarmupCosine; ``scheduler.step()`` once per optimizer step."""
    if cfg.warmup_steps > total_steps:
        raise ValueError(f"optim.warmup_steps={cfg.warmup_steps} exceeds the run's {total_steps} steps")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(total_steps, cfg.warmup_steps, cfg.min_lr_ratio))


def extend_schedule(optimizer: torch.optim.Optimizer, scheduler, total_steps: int) -> None:
    """After loading a checkpoint: follow the schedule of a run of ``total_steps`` steps from here on.

    The rule when a resumed run is extended (``--resume --set train.steps=N``): the steps already
    taken keep the learning rates they had; from the resume step s on, lr(s) is the schedule of a
    run configured with N steps from the start (the cosine stretched to the new end), so the rate
    jumps from the old curve to the new one at s. Same total: nothing changes (bitwise).
    """
    schedule = scheduler.lr_lambdas[0]
    if schedule.total_steps == total_steps:
        return
    schedule.total_steps = total_steps
    for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * schedule(scheduler.last_epoch)
