"""Random-future control: does a language model's loss at position c use the tokens after c?

For held-out blocks x [N, T] and cut positions c, compare the next-token loss at c

    real     ℓ_c = −log p(x_{c+1} | model(x))                     (one forward of the real blocks)
    control  ℓ̃_c = −log p(x_{c+1} | model(x_{≤c}, r_{c+1..T−1}))  (every token after c replaced by a random id)

A causal model gives ℓ̃_c = ℓ_c (the logits at c cannot change, bit for bit when the batches have
the same shape). A model that reads the future gets its label, x_{c+1}, through the input in the
real run but not in the control, so its control loss is higher: the rise ℓ̃ − ℓ measures how much
of its apparent skill came from the future.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F


@dataclass
class FutureControlReport:
    """Mean next-token losses (nats) at the cut positions, real inputs vs random futures."""

    loss_real: float
    loss_random_future: float
    rise: float            # loss_random_future − loss_real
    cuts: list[int]
    per_cut_real: list[float]
    per_cut_random_future: list[float]
    num_blocks: int

    def to_json(self) -> dict:
        return asdict(self)


def _losses_at(model, ids: torch.Tensor, cut: int, targets: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, cut]  # [n, vocab]
    return F.cross_entropy(logits.double(), targets, reduction="none")


@torch.no_grad()
def future_control(model, blocks: torch.Tensor, cuts: list[int], *, random_ids: int, seed: int = 0,
                   batch_size: int = 16) -> FutureControlReport:
    """blocks [N, T] long; cuts in [0, T − 2]; random ids drawn uniformly from [0, random_ids)."""
    N, T = blocks.shape
    if not cuts or min(cuts) < 0 or max(cuts) > T - 2:
        raise ValueError(f"cuts: need values in [0, {T - 2}] (a next token must exist), got {cuts}")
    gen = torch.Generator().manual_seed(seed)
    real = torch.zeros(len(cuts), dtype=torch.float64)
    control = torch.zeros(len(cuts), dtype=torch.float64)
    for start in range(0, N, batch_size):
        x = blocks[start:start + batch_size]
        logits = model(input_ids=x).logits  # [n, T, vocab]
        for i, c in enumerate(cuts):
            real[i] += F.cross_entropy(logits[:, c].double(), x[:, c + 1], reduction="none").sum()
            noisy = x.clone()
            noisy[:, c + 1:] = torch.randint(0, random_ids, noisy[:, c + 1:].shape, generator=gen)
            control[i] += _losses_at(model, noisy, c, x[:, c + 1]).sum()
    real, control = real / N, control / N
    return FutureControlReport(float(real.mean()), float(control.mean()), float((control - real).mean()),
                               list(cuts), real.tolist(), control.tolist(), N)
