"""``needle``: key → value needles in a haystack of random filler ids, then a query for one key.

Ids: filler [0, F), keys [F, F + K), values [F + K, F + K + V), QUERY = F + K + V; vocabulary
F + K + V + 1 (F = num_filler, K = num_keys, V = num_values). A problem of context length L:

    prompt     h … h k₁ v₁ h … h k₂ v₂ h … QUERY k_q       L tokens: L − 2 of haystack holding
                                                           num_needles pairs (distinct keys), then the query
    reference  v_q                                         one token, no EOS

With S = L − 2 − 2·num_needles filler tokens, a needle at depth d ∈ [0, 1] follows round(d·S) of
them (depth 0: the first tokens; 1: just before the query); training draws every needle's depth
uniformly and queries one of them. ``case(rng, length=, depth=)`` (the NIAH probe) puts the queried needle at a given depth
and the others uniformly at random (never overlapping). Filler ids never equal a key, so a key
appears exactly twice: in its needle and, for the queried one, in the query. The checker: the
answer token equals v_q. A model that ignores the context is right with probability 1/V.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
from pydantic import Field, model_validator

from .base import Problem, VerifiableTask, answer_segments


class Needle(VerifiableTask):
    """Needle-in-a-haystack retrieval over token ids (the layout of the NIAH probe)."""

    seq_len: int = Field(256, ge=8, description="context length L of training problems (haystack + query)")
    num_needles: int = Field(1, ge=1, description="key-value pairs in the haystack; one of them is queried")
    num_filler: int = Field(64, ge=1, description="F, filler ids [0, F)")
    num_keys: int = Field(32, ge=1, description="K, key ids [F, F + K)")
    num_values: int = Field(32, ge=2, description="V, value ids [F + K, F + K + V)")

    @model_validator(mode="after")
    def _fits(self) -> "Needle":
        if self.num_needles > self.num_keys:
            raise ValueError(f"num_needles={self.num_needles} > num_keys={self.num_keys}: needles need distinct keys")
        if 2 * self.num_needles > self.seq_len - 2:
            raise ValueError(f"seq_len={self.seq_len} cannot hold {self.num_needles} needles of 2 tokens and a "
                             f"query of 2")
        return self

    @property
    def query_id(self) -> int:
        return self.num_filler + self.num_keys + self.num_values

    @property
    def vocab_size(self) -> int:
        return self.query_id + 1

    @property
    def eos_id(self) -> None:
        return None

    @property
    def pad_id(self) -> int:
        return self.query_id

    @property
    def max_new_tokens(self) -> int:
        return 1

    @property
    def row_length(self) -> int:
        return self.seq_len + 1

    def case(self, rng: np.random.Generator, *, length: int, depth: float | None) -> Problem:
        """A problem of context ``length`` with the queried needle at ``depth`` in [0, 1] (None: uniform)."""
        n, slots = self.num_needles, length - 2 - 2 * self.num_needles    # free haystack tokens
        if slots < 0:
            raise ValueError(f"length={length} cannot hold {n} needles and the query (need >= {2 * n + 2})")
        if depth is not None and not 0.0 <= depth <= 1.0:
            raise ValueError(f"depth must be in [0, 1], got {depth}")
        keys = self.num_filler + rng.choice(self.num_keys, size=n, replace=False)
        values = self.num_filler + self.num_keys + rng.integers(self.num_values, size=n)
        # 1. where the needles go: filler tokens before needle i (the queried one is needle 0)
        target = int(rng.integers(slots + 1)) if depth is None else int(round(depth * slots))
        others = np.sort(rng.integers(slots + 1, size=n - 1))
        cuts = np.sort(np.concatenate([[target], others]))                 # filler tokens before each needle
        order = np.argsort(np.concatenate([[target], others]), kind="stable")  # needle index at each cut
        # 2. lay them out: filler, needle, filler, needle, ..., filler, QUERY k_0
        filler = rng.integers(self.num_filler, size=slots)
        ids: list[int] = []
        start = 0
        for cut, i in zip(cuts, order):
            ids += [*map(int, filler[start:cut]), int(keys[i]), int(values[i])]
            start = cut
        ids += [*map(int, filler[start:]), self.query_id, int(keys[0])]
        return Problem(prompt=tuple(ids), reference=(int(values[0]),),
                       info={"answer": int(values[0]), "needle_at": ids.index(int(keys[0]))})

    def problem(self, rng: np.random.Generator) -> Problem:
        return self.case(rng, length=self.seq_len, depth=None)

    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        segments = answer_segments(response, marker=self.query_id, eos=None, starts_with_answer=True)
        return [seg[0] for seg in segments if len(seg) == 1]

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        return answer is not None and answer == problem.info["answer"]

    def decode(self, ids: Sequence[int]) -> str:
        names = {self.query_id: "QUERY"}
        return " ".join(names.get(int(t), str(int(t))) for t in ids)
