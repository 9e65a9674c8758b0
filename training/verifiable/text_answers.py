"""Answers in text: GSM8K's ``#### answer`` lines, from local files, with any tokenizer.

GSM8K (Cobbe et al. 2021) ends every reference solution with a line ``#### <number>``; models
trained on it answer the same way. A response's candidates are the numbers after each ``####``
(``extract_hash_answers``), normalised so that "1,000", "$1000", "1000." and "1000.00" are one
answer. ``TextAnswers`` reads a local JSON-lines/JSON/parquet file of question/answer records
(field names configurable), tokenizes the prompts, and checks responses against the number after
the reference's ``####`` (a record whose reference has no such line, or two different ones, is
refused). Nothing is downloaded: a user with a local copy of GSM8K's test split runs it as is.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Hashable, Sequence

from ..text_files import encode_text, load_text_files, text_values
from .base import Problem

_HASH_ANSWER = re.compile(r"####\s*(-?[$0-9.,]*[0-9])")


def normalize_number(text: str) -> str | None:
    """Canonical string of a number written with optional $, thousands commas and trailing zeros."""
    cleaned = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    value = value.normalize()
    return format(value.quantize(Decimal(1)) if value == value.to_integral() else value, "f")


def extract_hash_answers(text: str) -> list[str]:
    """Every ``#### <number>`` of ``text``, normalised, in order (unparseable ones skipped)."""
    found = (normalize_number(m.group(1)) for m in _HASH_ANSWER.finditer(text))
    return [a for a in found if a is not None]


class TextAnswers:
    """GSM8K-style problems from a local file: prompt from ``prompt_field``, the checked answer after
    ``####`` in ``answer_field``; responses decoded with ``tokenizer`` and read the same way."""

    def __init__(self, path: str | Path, *, tokenizer, prompt_field: str = "question", answer_field: str = "answer",
                 prompt_template: str = "{prompt}", max_new_tokens: int = 256):
        if "{prompt}" not in prompt_template:
            raise ValueError(f"prompt_template must contain '{{prompt}}', got {prompt_template!r}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        raw = load_text_files([path])
        missing = [f for f in (prompt_field, answer_field) if f not in raw.column_names]
        if missing:
            raise ValueError(f"{path}: no field {missing}; the records have {raw.column_names} (set prompt_field / "
                             f"answer_field)")
        self.tokenizer, self.path = tokenizer, str(path)
        self.max_new_tokens, self.eos_id = max_new_tokens, getattr(tokenizer, "eos_token_id", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (self.eos_id if self.eos_id is not None else 0)
        self.vocab_size = len(tokenizer)
        prompts, answers = text_values(raw, prompt_field), text_values(raw, answer_field)
        self._problems = [self._problem(i, prompt_template.format(prompt=q), a)
                          for i, (q, a) in enumerate(zip(prompts, answers))]

    def _problem(self, index: int, prompt: str, reference: str) -> Problem:
        answers = list(dict.fromkeys(extract_hash_answers(reference)))
        if len(answers) != 1:
            raise ValueError(f"{self.path} record {index}: the reference must end with one '#### <number>' line, "
                             f"found {answers or 'none'}")
        ids = encode_text(self.tokenizer, prompt)
        if not ids:
            raise ValueError(f"{self.path} record {index}: the prompt is empty after tokenization")
        eos = [self.eos_id] if self.eos_id is not None else []
        return Problem(prompt=tuple(ids), reference=tuple(encode_text(self.tokenizer, reference) + eos),
                       info={"answer": answers[0]})

    def problems(self, n: int | None = None) -> list[Problem]:
        """The first ``n`` problems in file order (all when None)."""
        if n is not None and not 1 <= n <= len(self._problems):
            raise ValueError(f"{self.path} has {len(self._problems)} problems; asked for {n}")
        return self._problems[:n]

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(t) for t in ids]
        if self.eos_id is not None and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids)

    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        return extract_hash_answers(self.decode(response))

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        return answer is not None and answer == problem.info["answer"]
