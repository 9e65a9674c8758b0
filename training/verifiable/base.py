"""What every verifiable task shares: problems, answer extraction, scoring rules, training rows.

A verifiable task is a problem generator with a checker. A problem is a prompt (token ids), one
reference response and what the checker needs; a response is scored in two steps:

    candidates = task.candidates(response)      every answer the response states, in order
    answer     = RULES[rule](candidates)        one answer, or None (no usable answer)
    correct    = task.check(problem, answer)    False for None

The rule is the one place where scoring conventions differ (the table ``RULES``; a task may name its
own default, ``task_rule``):

    first   the first candidate (lm-evaluation-harness' GSM8K "strict-match" takes the first match)
    last    the last candidate
    strict  the one candidate if the response states exactly one distinct answer, else None: Nautile
            (000_fd0d8cd631afd5a9.txt, Table 2 caption) scores a response with more than one candidate
            answer as wrong. Repeating the same answer is one candidate.

Training rows (``problems_dataset``) are prompt + reference with the loss on the reference only
(labels −100 on the prompt and on the right padding), HF-aligned as in tasks.py.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Protocol, Sequence

import datasets
import numpy as np
from pydantic import BaseModel, ConfigDict

from ..prompt_response import prompt_response_arrays
from ..tasks import arrays_to_dataset


@dataclass(frozen=True)
class Problem:
    """One problem: ``prompt`` and a correct ``reference`` response (token ids); ``info`` holds what
    the checker needs (JSON-serialisable)."""

    prompt: tuple[int, ...]
    reference: tuple[int, ...]
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"prompt": list(self.prompt), "reference": list(self.reference), **self.info}


def _first(candidates: list[Hashable]) -> Hashable | None:
    return candidates[0] if candidates else None


def _last(candidates: list[Hashable]) -> Hashable | None:
    return candidates[-1] if candidates else None


def _strict(candidates: list[Hashable]) -> Hashable | None:
    distinct = list(dict.fromkeys(candidates))
    return distinct[0] if len(distinct) == 1 else None


RULES: dict[str, Callable[[list[Hashable]], Hashable | None]] = {"first": _first, "last": _last, "strict": _strict}


def select_answer(candidates: list[Hashable], rule: str) -> Hashable | None:
    """The answer a scoring rule takes from a response's candidates (None: no usable answer)."""
    if rule not in RULES:
        raise ValueError(f"unknown scoring rule {rule!r}; choose one of {list(RULES)}")
    return RULES[rule](candidates)


class Checkable(Protocol):
    """What sampling and scoring need from a problem set: the verifiable tasks below and
    ``TextAnswers`` (GSM8K-style files) both have it."""

    vocab_size: int
    eos_id: int | None
    pad_id: int
    max_new_tokens: int

    def candidates(self, response: Sequence[int]) -> list[Hashable]: ...

    def check(self, problem: Problem, answer: Hashable | None) -> bool: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def task_rule(task: Checkable, rule: str | None) -> str:
    """``rule``, or when None the task's ``default_rule`` (a text problem set's extractor convention,
    text_answers.py), else ``first``."""
    return rule if rule is not None else getattr(task, "default_rule", "first")


def score_response(task: Checkable, problem: Problem, response: Sequence[int],
                   rule: str | None = None) -> tuple[Hashable | None, bool]:
    """(answer, correct) of one response under a scoring rule (see RULES; None: ``task_rule``)."""
    answer = select_answer(task.candidates(response), task_rule(task, rule))
    return answer, answer is not None and bool(task.check(problem, answer))


def answer_segments(response: Sequence[int], *, marker: int, eos: int | None,
                    starts_with_answer: bool) -> list[tuple[int, ...]]:
    """The token segments that follow each answer marker, up to the next marker or EOS.

    ``response`` is cut at its first EOS (tokens after it are never read). ``starts_with_answer``:
    the prompt ends with the marker, so the response's first segment is an answer too.
    """
    ids = [int(t) for t in response]
    if eos is not None and eos in ids:
        ids = ids[: ids.index(eos)]
    segments, current = [], None if not starts_with_answer else []
    for tok in ids:
        if tok == marker:
            if current is not None:
                segments.append(tuple(current))
            current = []
        elif current is not None:
            current.append(tok)
    if current is not None:
        segments.append(tuple(current))
    return segments


class VerifiableTask(BaseModel):
    """Base of the token-level tasks: parameters as pydantic fields; subclasses define the layout
    (the abstract members below) and inherit problem sets, scoring and training rows."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # every float finite

    # ------------------------------------------------------------ layout (subclasses)
    @property
    @abstractmethod
    def vocab_size(self) -> int:
        ...

    @property
    @abstractmethod
    def eos_id(self) -> int | None:
        """Token that ends a response (None: the response has a fixed length, max_new_tokens)."""
        ...

    @property
    @abstractmethod
    def pad_id(self) -> int:
        ...

    @property
    @abstractmethod
    def max_new_tokens(self) -> int:
        """Longest response (reference or generated) the task needs, EOS included."""
        ...

    @abstractmethod
    def problem(self, rng: np.random.Generator) -> Problem:
        ...

    @abstractmethod
    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        ...

    @abstractmethod
    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        ...

    # ------------------------------------------------------------ shared
    def problems(self, n: int, *, seed: int) -> list[Problem]:
        """``n`` problems drawn independently with ``numpy.random.default_rng(seed)`` (a smaller set is
        a prefix of a larger one with the same seed)."""
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"the number of problems must be a positive int, got {n!r}")
        rng = np.random.default_rng(seed)
        return [self.problem(rng) for _ in range(n)]

    @property
    @abstractmethod
    def row_length(self) -> int:
        """Width of a training row: the longest prompt plus max_new_tokens."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Readable form of token ids (names of the special tokens in brackets)."""
        return " ".join(str(int(t)) for t in ids)


def problems_dataset(task: VerifiableTask, problems: Sequence[Problem]) -> datasets.Dataset:
    """Training rows [N, task.row_length]: prompt + reference, loss on the reference only."""
    if not problems:
        raise ValueError("no problems to turn into training rows")
    inputs, labels = prompt_response_arrays([p.prompt for p in problems], [p.reference for p in problems],
                                            width=task.row_length, pad_id=task.pad_id)
    return arrays_to_dataset({"input_ids": inputs, "labels": labels})
