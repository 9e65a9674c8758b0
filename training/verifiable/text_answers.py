"""A problem set from a local file: prompts, reference answers and metadata, checked by answer extraction.

``TextAnswers`` reads a JSON-lines / JSON / parquet file of records (field names configurable):

    prompt_field      the question; formatted with ``prompt_template`` ("{prompt}" in it), then, when the
                      tokenizer has a chat template and ``chat_template`` is "auto" (or "on"), wrapped
                      as one user turn (after an optional system prompt) with the generation prompt
    answer_field      the reference: a full solution (GSM8K's "... #### 72", MATH's "... \\boxed{3/4}")
                      read with ``reference_extractor`` (default: the response extractor), or the
                      answer alone (``reference_extractor: whole``); it must state exactly one answer
    metadata_fields   further fields kept in ``Problem.info["metadata"]`` (for Python checkers)

Responses are decoded with the same tokenizer and read by the registered extractor ``extractor``
(extract.py ``EXTRACTORS``: boxed, gsm8k, last_number, multiple_choice, whole); its default scoring
rule is the task's ``default_rule``. A response is correct when its answer's normal form equals the
reference's (extract.py ``normalize_answer``). Nothing is downloaded: a local copy of GSM8K's or
MATH's test split runs as is. A file that is not a problem set is a ValueError naming the file, the
record and the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Hashable, Literal, Sequence

from pydantic import BeforeValidator

from ..text_files import encode_text, load_text_files
from .base import Problem
from .extract import extract_answers, get_extractor

ChatTemplate = Literal["auto", "on", "off"]


def _switch_word(value: Any) -> Any:
    """YAML 1.1 reads a bare ``on`` / ``off`` as true / false: the switch the config spells."""
    return ("on" if value else "off") if isinstance(value, bool) else value


ChatTemplateOption = Annotated[ChatTemplate, BeforeValidator(_switch_word)]  # a config field (``chat_template: on``)


def _records(path: str | Path, fields: Sequence[str]) -> list[dict[str, Any]]:
    """The file's records; every one must hold every field in ``fields`` as text."""
    raw = load_text_files([path])
    missing = [f for f in fields if f not in raw.column_names]
    if missing:
        raise ValueError(f"{path} is not a problem set with fields {list(fields)}: no field {missing} (the records "
                         f"have {raw.column_names}; set prompt_field / answer_field / metadata_fields)")
    records = raw.to_list()
    for i, record in enumerate(records):
        for f in fields[:2]:
            if not isinstance(record[f], str):
                raise ValueError(f"{path} record {i} (0-based): field {f!r} is {type(record[f]).__name__} "
                                 f"{record[f]!r:.60}, not text; every record's {f} must be a string")
    return records


def check_prompt_template(template: str) -> str:
    """``template`` if it is a format string whose one field is ``{prompt}``, else a ValueError saying why."""
    if "{prompt}" not in template:
        raise ValueError(f"prompt_template must contain '{{prompt}}', got {template!r}")
    try:
        template.format(prompt="")
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"prompt_template {template!r:.80} is not a format string whose one field is {{prompt}} "
                         f"({type(err).__name__}: {err}); write a literal brace as {{{{ or }}}}") from None
    return template


def format_prompt(tokenizer, question: str, *, template: str = "{prompt}", chat_template: ChatTemplate = "auto",
                  system_prompt: str | None = None) -> str:
    """The prompt text a model reads: ``template`` filled, then the tokenizer's chat template when it has one
    (``auto``), always (``on``: a tokenizer without one is refused) or never (``off``)."""
    text = template.format(prompt=question)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ValueError(f"chat_template: on, but the tokenizer ({type(tokenizer).__name__}) has no chat template; "
                         f"use auto or off")
    if chat_template == "off" or not has_template:
        if system_prompt:
            text = f"{system_prompt}\n\n{text}"
        return text
    turns = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": text}]
    import jinja2

    try:
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    except jinja2.TemplateError as err:  # the tokenizer folder's template (a syntax error, a refused system turn)
        raise ValueError(f"the tokenizer's chat template ({getattr(tokenizer, 'name_or_path', '') or 'in memory'}) "
                         f"failed on a prompt{' with a system prompt' if system_prompt else ''}: "
                         f"{type(err).__name__}: {err}; fix the template, leave out the system prompt, or set "
                         f"chat_template: off (--chat-template off)") from None


class TextAnswers:
    """A problem set from a local file (module docstring); a ``Checkable`` for sampling and rewards."""

    def __init__(self, path: str | Path, *, tokenizer, prompt_field: str = "question", answer_field: str = "answer",
                 prompt_template: str = "{prompt}", max_new_tokens: int = 256, extractor: str = "gsm8k",
                 reference_extractor: str | None = None, metadata_fields: Sequence[str] = (),
                 chat_template: ChatTemplate = "auto", system_prompt: str | None = None):
        check_prompt_template(prompt_template)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if chat_template not in ("auto", "on", "off"):
            raise ValueError(f"chat_template must be auto, on or off, got {chat_template!r}")
        self.extractor = extractor
        self.default_rule = get_extractor(extractor).rule
        self.reference_extractor = reference_extractor or extractor
        get_extractor(self.reference_extractor)
        self.tokenizer, self.path = tokenizer, str(path)
        self.max_new_tokens, self.eos_id = max_new_tokens, getattr(tokenizer, "eos_token_id", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (self.eos_id if self.eos_id is not None else 0)
        self.vocab_size = len(tokenizer)
        self._format = dict(template=prompt_template, chat_template=chat_template, system_prompt=system_prompt)
        fields = [prompt_field, answer_field, *metadata_fields]
        self._problems = [self._problem(i, r, fields) for i, r in enumerate(_records(path, fields))]

    def _problem(self, index: int, record: dict, fields: list[str]) -> Problem:
        question, reference = record[fields[0]], record[fields[1]]
        answers = list(dict.fromkeys(extract_answers(reference, self.reference_extractor)))
        if len(answers) != 1:
            raise ValueError(f"{self.path} record {index} (0-based), field {fields[1]!r}: the reference must state "
                             f"one answer the {self.reference_extractor!r} extractor reads, found {answers or 'none'} "
                             f"in {reference!r:.80} (set reference_extractor, e.g. 'whole' for a bare answer)")
        ids = encode_text(self.tokenizer, format_prompt(self.tokenizer, question, **self._format))
        if not ids:
            raise ValueError(f"{self.path} record {index} (0-based), field {fields[0]!r}: the prompt is empty after "
                             f"tokenization")
        eos = [self.eos_id] if self.eos_id is not None else []
        metadata = {f: record[f] for f in fields[2:]}
        return Problem(prompt=tuple(ids), reference=tuple(encode_text(self.tokenizer, reference) + eos),
                       info={"answer": answers[0], "question": question, **({"metadata": metadata} if metadata else {})})

    def problems(self, n: int | None = None) -> list[Problem]:
        """The first ``n`` problems in file order (all when None)."""
        if n is not None and not 1 <= n <= len(self._problems):
            raise ValueError(f"{self.path} has {len(self._problems)} problems; asked for {n}")
        return self._problems[:n]

    @property
    def row_length(self) -> int:
        """Width of a training row: the longest prompt + reference (EOS included)."""
        return max(len(p.prompt) + len(p.reference) for p in self._problems)

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(t) for t in ids]
        if self.eos_id is not None and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids)

    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        return extract_answers(self.decode(response), self.extractor)

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        return answer is not None and answer == problem.info["answer"]
