"""``chain_sum``: running sums mod 10 written out, then the final sum after a marker.

Layout (m = num_digits; ids 0–9 are the digits):

    prompt     d_1 d_2 … d_m SEP                        d_i uniform in 0..9
    reference  s_1 s_2 … s_m ANS s_m EOS                s_i = (d_1 + … + d_i) mod 10 (the scratchpad)

The checker reads only the answer: the segment after an ANS marker (up to the next marker or EOS)
must be one digit equal to (Σ d_i) mod 10; the scratchpad is the model's chain of thought and is
not graded. Every response token is supervised in training (the scratchpad too).
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
from pydantic import Field

from .base import Problem, VerifiableTask, answer_segments

SEP, ANS, EOS, PAD = 10, 11, 12, 13
_NAMES = {SEP: "SEP", ANS: "ANS", EOS: "EOS", PAD: "PAD"}


class ChainSum(VerifiableTask):
    """Sum of m digits mod 10 with a scratchpad of running sums."""

    num_digits: int = Field(8, ge=1, le=512, description="m, the digits in the prompt")

    @property
    def vocab_size(self) -> int:
        return 14  # digits 0-9, SEP, ANS, EOS, PAD

    @property
    def eos_id(self) -> int:
        return EOS

    @property
    def pad_id(self) -> int:
        return PAD

    @property
    def max_new_tokens(self) -> int:
        return self.num_digits + 3  # scratchpad, ANS, answer, EOS

    @property
    def row_length(self) -> int:
        return self.num_digits + 1 + self.max_new_tokens

    def problem(self, rng: np.random.Generator) -> Problem:
        digits = rng.integers(0, 10, size=self.num_digits)
        sums = np.cumsum(digits) % 10                                      # s_1 .. s_m
        answer = int(sums[-1])
        return Problem(prompt=(*map(int, digits), SEP), reference=(*map(int, sums), ANS, answer, EOS),
                       info={"answer": answer})

    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        return [seg[0] for seg in answer_segments(response, marker=ANS, eos=EOS, starts_with_answer=False)
                if len(seg) == 1 and 0 <= seg[0] <= 9]

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        return answer is not None and answer == problem.info["answer"]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(_NAMES.get(int(t), str(int(t))) for t in ids)
