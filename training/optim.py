"""AdamW with decoupled weight decay on matrices and a learning-rate schedule.

``optim.schedule: warmup_cosine`` (the default), at optimizer step s (0-indexed) of S steps,
warm-up W, floor r:

    lr(s) = lr · (s + 1) / W                                      for s < W
    lr(s) = lr · (r + (1 − r) · ½ (1 + cos(π (s − W) / (S − W))))  otherwise

It is transformers' ``cosine_with_min_lr`` (min_lr_rate = r) shifted by one step during the
warm-up (transformers starts at s / W = 0, a first step that does not move; ours at 1 / W), and
equal to it from s = W − 1 on (tests/training/test_schedules.py). Every other name of
``optim.schedule`` is transformers' ``get_scheduler`` of that name over S steps with W warm-up steps.

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


# transformers' schedules that take more than (warm-up, total steps): their extra arguments from the config
_HF_EXTRA = {"cosine_with_min_lr": lambda cfg: {"min_lr_rate": cfg.min_lr_ratio}}


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int):
    """A LambdaLR (ours over WarmupCosine, or transformers' get_scheduler of ``cfg.schedule``);
    ``scheduler.step()`` once per optimizer step."""
    if cfg.warmup_steps > total_steps:
        raise ValueError(f"optim.warmup_steps={cfg.warmup_steps} exceeds the run's {total_steps} steps")
    if cfg.schedule == "warmup_cosine":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(total_steps, cfg.warmup_steps,
                                                                         cfg.min_lr_ratio))
    from transformers import get_scheduler

    extra = _HF_EXTRA[cfg.schedule](cfg) if cfg.schedule in _HF_EXTRA else None
    return get_scheduler(cfg.schedule, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=total_steps,
                         scheduler_specific_kwargs=extra)


def extend_schedule(optimizer: torch.optim.Optimizer, scheduler, total_steps: int) -> None:
    """After loading a checkpoint: follow the schedule of a run of ``total_steps`` steps from here on.

    The rule when a resumed run is extended (``--resume --set train.steps=N``): the steps already
    taken keep the learning rates they had; from the resume step s on, lr(s) is the schedule of a
    run configured with N steps from the start (the cosine stretched to the new end), so the rate
    jumps from the old curve to the new one at s. Same total: nothing changes (bitwise).

    WarmupCosine's total is restored from the checkpoint and set here; transformers' schedules keep
    the total they were built with (this run's: their state holds no numbers), so only the rate of
    the current step is recomputed, as LambdaLR.step() computes it.
    """
    schedule = scheduler.lr_lambdas[0]
    if isinstance(schedule, WarmupCosine):
        if schedule.total_steps == total_steps:
            return
        schedule.total_steps = total_steps
    for group, base, fn in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * fn(scheduler.last_epoch)
