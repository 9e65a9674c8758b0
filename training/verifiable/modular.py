"""``modular``: (a ∘ b) mod p in the layout of Nanda et al. 2023 ("Progress measures for grokking").

Ids 0..p−1 are the numbers and id p is "="; the vocabulary has p + 1 ids. A problem is

    prompt     a b =          [a, b, p]
    reference  c              c = (a ∘ b) mod p, one token, no EOS (predicted at "=")

which is Nanda's 3-token input with the label at the last position; as a training row it is
[a, b, =, c] with labels [−100, −100, −100, c] (HF-aligned). The operations are Nanda's:
add (a + b), subtract (a − b), x2xyy2 (a² + ab + b²), plus multiply (a·b).

``split(seed)`` is Nanda's train/test split of all p² pairs: the pairs in row-major order
(a outer, b inner), shuffled by Python's ``random.seed(seed); random.shuffle(pairs)``, the first
int(train_fraction · p²) for training (p = 113, 0.3, seed 0 gives 3830 / 8939). Nanda's
``random.seed`` + ``random.shuffle`` equals ``random.Random(seed).shuffle`` used here.
``problems(n, seed)`` draws pairs uniformly with replacement instead (for probes).
"""
from __future__ import annotations

import random
from typing import Callable, Hashable, Literal, Sequence

import numpy as np
from pydantic import Field

from .base import Problem, VerifiableTask, answer_segments

OPERATIONS: dict[str, Callable[[int, int, int], int]] = {
    "add": lambda a, b, p: (a + b) % p,
    "subtract": lambda a, b, p: (a - b) % p,
    "multiply": lambda a, b, p: (a * b) % p,
    "x2xyy2": lambda a, b, p: (a * a + a * b + b * b) % p,
}


class Modular(VerifiableTask):
    """(a ∘ b) mod p, Nanda's layout."""

    p: int = Field(113, ge=2, description="the modulus (numbers 0..p−1, '=' is id p)")
    op: Literal["add", "subtract", "multiply", "x2xyy2"] = Field("add", description="the operation ∘")
    train_fraction: float = Field(0.3, gt=0, lt=1, description="fraction of the p² pairs in the training split")

    @property
    def vocab_size(self) -> int:
        return self.p + 1

    @property
    def eos_id(self) -> None:
        return None

    @property
    def pad_id(self) -> int:
        return self.p

    @property
    def max_new_tokens(self) -> int:
        return 1

    @property
    def row_length(self) -> int:
        return 4

    def make(self, a: int, b: int) -> Problem:
        """The problem for the pair (a, b)."""
        c = OPERATIONS[self.op](a, b, self.p)
        return Problem(prompt=(a, b, self.p), reference=(c,), info={"answer": c})

    def problem(self, rng: np.random.Generator) -> Problem:
        a, b = (int(x) for x in rng.integers(0, self.p, size=2))
        return self.make(a, b)

    def split(self, seed: int) -> tuple[list[Problem], list[Problem]]:
        """Nanda's (train, test) split of all p² pairs (see the module docstring)."""
        pairs = [(a, b) for a in range(self.p) for b in range(self.p)]
        random.Random(seed).shuffle(pairs)
        cut = int(self.train_fraction * len(pairs))
        if cut == 0 or cut == len(pairs):
            raise ValueError(f"train_fraction={self.train_fraction} of {len(pairs)} pairs leaves an empty split")
        return [self.make(a, b) for a, b in pairs[:cut]], [self.make(a, b) for a, b in pairs[cut:]]

    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        segments = answer_segments(response, marker=self.p, eos=None, starts_with_answer=True)
        return [seg[0] for seg in segments if len(seg) == 1]

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        return answer is not None and answer == problem.info["answer"]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join("=" if int(t) == self.p else str(int(t)) for t in ids)
