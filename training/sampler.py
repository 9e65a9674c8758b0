"""Deterministic batches: step s of a run always reads the same sequences.

The training stream is an endless concatenation of epochs; epoch e is the
permutation ``numpy.random.default_rng([seed, e]).permutation(N)``. The global
batch of step s holds stream positions s·B .. s·B + B − 1. The data position
of a run is therefore just its step, which makes resuming exact and lets N
processes split each global batch into equal slices.
"""
from __future__ import annotations

import numpy as np


class StepSampler:
    """Global batch indices per optimizer step over a dataset of ``num_examples`` rows."""

    def __init__(self, num_examples: int, batch_size: int, *, seed: int):
        if num_examples < 1 or batch_size < 1:
            raise ValueError(f"num_examples and batch_size must be >= 1, got {num_examples}, {batch_size}")
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self._cache: dict[int, np.ndarray] = {}

    def _epoch(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            self._cache = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)}
        return self._cache[epoch]

    def indices(self, step: int) -> np.ndarray:
        """Dataset rows of the global batch of ``step`` (int64 [batch_size])."""
        positions = step * self.batch_size + np.arange(self.batch_size)  # stream positions
        epochs, offsets = np.divmod(positions, self.num_examples)
        return np.array([self._epoch(int(e))[o] for e, o in zip(epochs, offsets)], dtype=np.int64)

    def epoch_of(self, step: int) -> float:
        """Fractional epochs completed after ``step`` steps."""
        return step * self.batch_size / self.num_examples
