"""``ProblemsFile``: the config section that names a problem file, for ``train`` (SFT on prompt +
reference), ``eval``, ``rl`` and ``probe tts`` alike (``data: {kind: problems, path: ...}``).

    data:
      kind: problems
      path: data/gsm8k_train.jsonl         # JSON lines / JSON / parquet records
      eval_path: data/gsm8k_test.jsonl     # held-out problems (else the last num_eval records of path)
      prompt_field: question
      answer_field: answer
      extractor: gsm8k                     # boxed | gsm8k | last_number | multiple_choice | whole
      tokenizer: runs/sft/final            # 'bytes' or a local HF tokenizer folder (its chat template applies)

The section validates without reading anything; the file is read once, on first use (``task``). It
acts as the problem set itself (``vocab_size``, ``candidates``, ``check``, ... of the loaded
``TextAnswers``), so the RL loop and the samplers take it where they take a synthetic task.
"""
from __future__ import annotations

from functools import cached_property
from typing import Hashable, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import Problem
from .extract import EXTRACTORS
from .text_answers import ChatTemplateOption, TextAnswers, check_prompt_template


class ProblemsFile(BaseModel):
    """A problem set in a local file (text_answers.py) and its split into training and held-out problems."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, ignored_types=(cached_property,))

    path: str = Field(description="local .jsonl/.json/.parquet file of problem records")
    eval_path: str | None = Field(None, description="held-out problems (null: the last num_eval records of path)")
    num_eval: int = Field(0, ge=0, description="records held out from the end of path when eval_path is null")
    num_train: int | None = Field(None, ge=1, description="use the first num_train training problems (null: all)")
    tokenizer: str = Field("bytes", description="'bytes' or a local HF tokenizer folder (its chat template applies)")
    prompt_field: str = Field("question", description="field of the question")
    answer_field: str = Field("answer", description="field of the reference (solution or bare answer)")
    metadata_fields: list[str] = Field(default_factory=list, description="fields kept in Problem.info['metadata']")
    extractor: str = Field("gsm8k", description=f"answer extractor of responses: {', '.join(EXTRACTORS)}")
    reference_extractor: str | None = Field(None, description="extractor of the reference (null: extractor; "
                                            "'whole' when the field holds the answer alone)")
    prompt_template: str = Field("{prompt}", description="the prompt text, with '{prompt}' where the question goes")
    chat_template: ChatTemplateOption = Field("auto", description="wrap the prompt in the tokenizer's "
                                                        "chat template: when it has one (auto), always, never")
    system_prompt: str | None = Field(None, description="system turn (chat template) or text before the prompt")
    max_new_tokens: int = Field(256, ge=1, description="response budget, EOS included")

    @field_validator("extractor", "reference_extractor")
    @classmethod
    def _registered(cls, name: str | None) -> str | None:
        if name is not None and name not in EXTRACTORS:
            raise ValueError(f"unknown answer extractor {name!r}; registered extractors: {list(EXTRACTORS)}")
        return name

    @field_validator("prompt_template")
    @classmethod
    def _has_slot(cls, template: str) -> str:
        return check_prompt_template(template)

    @model_validator(mode="after")
    def _one_held_out_source(self) -> "ProblemsFile":
        if self.eval_path is not None and self.num_eval:
            raise ValueError(f"give eval_path or num_eval ({self.num_eval}), not both")
        return self

    # ------------------------------------------------------------ the loaded sets
    def _read(self, path: str) -> TextAnswers:
        from ..text_files import load_tokenizer

        return TextAnswers(path, tokenizer=load_tokenizer(self.tokenizer), prompt_field=self.prompt_field,
                           answer_field=self.answer_field, prompt_template=self.prompt_template,
                           max_new_tokens=self.max_new_tokens, extractor=self.extractor,
                           reference_extractor=self.reference_extractor, metadata_fields=self.metadata_fields,
                           chat_template=self.chat_template, system_prompt=self.system_prompt)

    @cached_property
    def task(self) -> TextAnswers:
        """The problems of ``path`` (read on first use)."""
        return self._read(self.path)

    def split(self) -> tuple[list[Problem], list[Problem]]:
        """(training problems, held-out problems)."""
        return self._sets

    @cached_property
    def _sets(self) -> tuple[list[Problem], list[Problem]]:
        problems = self.task.problems()
        if self.eval_path is not None:
            held_out = self._read(self.eval_path).problems()
        else:
            if self.num_eval >= len(problems):
                raise ValueError(f"{self.path} has {len(problems)} problems; num_eval={self.num_eval} leaves none "
                                 f"to train on")
            problems, held_out = problems[:len(problems) - self.num_eval], problems[len(problems) - self.num_eval:]
        if self.num_train is not None and self.num_train > len(problems):
            raise ValueError(f"data.num_train={self.num_train}, but {self.path} has {len(problems)} training problems"
                             f"{f' after num_eval={self.num_eval}' if self.num_eval else ''}; lower num_train or "
                             f"leave it out (all)")
        return problems[:self.num_train], held_out

    # ------------------------------------------------------------ Checkable, from the loaded set
    @property
    def vocab_size(self) -> int:
        return self.task.vocab_size

    @property
    def eos_id(self) -> int | None:
        return self.task.eos_id

    @property
    def pad_id(self) -> int:
        return self.task.pad_id

    @property
    def default_rule(self) -> str:
        return EXTRACTORS[self.extractor].rule

    @property
    def row_length(self) -> int:
        """Width of a training row: the longest prompt + reference of either set."""
        return max(len(p.prompt) + len(p.reference) for part in self.split() for p in part)

    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        return self.task.candidates(response)

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        return self.task.check(problem, answer)

    def decode(self, ids: Sequence[int]) -> str:
        return self.task.decode(ids)
