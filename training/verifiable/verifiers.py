"""Verifiers by kind, and weighted sums of them: rewards for RL and scores for best-of-N.

A verifier scores the G responses of each of P problems at once, as a reward does
(training/rl/rewards.py):

    fn(task, problems, responses) -> [P][G] floats         responses: token tuples

The kinds (``VERIFIER_KINDS``, one table; a config names one with ``kind:``):

    exact_match   1 if the answer read under the scoring rule equals the reference's (normal form,
                  extract.py), else 0; the task's checker (``score_response``)
    numeric       1 if answer and reference are numbers with |a − r| <= max(rel_tol·max(|a|, |r|), abs_tol)
                  (``math.isclose``'s rule, on exact values: fractions included), else 0
    python        a user's function ``module:function`` loaded from the folder ``path`` given in the
                  config (never from sys.path, never from a model folder): fn(response_text,
                  answer, info) -> float or bool, where info is the problem's (reference "answer",
                  "question", "metadata")
    model         a second local HF model folder judges every response: p("Yes") after a judge
                  prompt (judge.py; Nautile §4.2's LLM-judge reward, thesis §3.5's external verifier)

``compose(weights, verifiers)`` is Σ_name weight · verifier_name, the form of a config's
``{name: weight}``; names are the registered rewards and the verifiers the config defines.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from functools import cached_property
from pathlib import Path
from typing import Annotated, Callable, Literal, Sequence, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import Checkable, Problem, score_response, select_answer, task_rule
from .extract import answer_value
from .judge import single_token, yes_scores
from .text_answers import ChatTemplateOption, format_prompt

VerifierFn = Callable[[Checkable, Sequence[Problem], Sequence[Sequence[tuple[int, ...]]]], object]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, ignored_types=(cached_property,))

    def load(self) -> "_Spec":
        """Read what the verifier needs (a checker's module, a judge's model) now, so that a bad one is refused
        before a command writes anything; the kinds that read nothing return at once."""
        return self


def _answer(task: Checkable, response, rule: str | None):
    return select_answer(task.candidates(response), task_rule(task, rule))


def _reference(problem: Problem, kind: str):
    if "answer" not in problem.info:
        raise ValueError(f"the {kind} verifier compares with the problem's reference answer (info['answer']); this "
                         f"task's problems have none (info keys {sorted(problem.info)})")
    return problem.info["answer"]


class ExactMatch(_Spec):
    """The answer under ``rule`` equals the reference's (the task's checker)."""

    kind: Literal["exact_match"] = "exact_match"
    rule: Literal["first", "last", "strict"] | None = Field(None, description="scoring rule (null: the task's)")

    def __call__(self, task, problems, responses):
        return [[float(score_response(task, p, r, self.rule)[1]) for r in group] for p, group in zip(problems, responses)]


class NumericTolerance(_Spec):
    """Numbers within a relative or absolute tolerance."""

    kind: Literal["numeric"] = "numeric"
    rel_tol: float = Field(1e-9, ge=0, description="relative tolerance (math.isclose's rel_tol)")
    abs_tol: float = Field(0.0, ge=0, description="absolute tolerance")
    rule: Literal["first", "last", "strict"] | None = Field(None, description="scoring rule (null: the task's)")

    def close(self, answer, reference) -> bool:
        a, r = answer_value(None if answer is None else str(answer)), answer_value(str(reference))
        if a is None or r is None:
            return False
        return math.isclose(float(a), float(r), rel_tol=self.rel_tol, abs_tol=self.abs_tol) or a == r

    def __call__(self, task, problems, responses):
        return [[float(self.close(_answer(task, r, self.rule), _reference(p, "numeric"))) for r in group]
                for p, group in zip(problems, responses)]


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() or any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def _holds_a_model(folder: Path) -> bool:
    """A folder written by save_pretrained: its config and its weights."""
    return (folder / "config.json").is_file() and (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")))


class PythonChecker(_Spec):
    """A user's function, loaded from an explicit folder."""

    kind: Literal["python"] = "python"
    function: str = Field(description="'module:function' (module dotted, relative to path)")
    path: str = Field(description="the folder holding the module (given explicitly; not a model folder)")

    @field_validator("function")
    @classmethod
    def _dotted(cls, value: str) -> str:
        module, _, name = value.partition(":")
        if not module or not name.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
            raise ValueError(f"function must be 'module:function' (e.g. 'my_checks:grade'), got {value!r}")
        return value

    def load(self) -> "PythonChecker":
        self.fn
        return self

    @cached_property
    def fn(self) -> Callable:
        module, _, name = self.function.partition(":")
        root = Path(self.path).resolve()
        file = root.joinpath(*module.split("."))
        file = file / "__init__.py" if file.is_dir() else file.with_suffix(".py")
        if not file.is_file():
            raise ValueError(f"python verifier: no module {module!r} in {root} (looked for {file})")
        inside = [file.parent, *file.parent.parents]
        for folder in inside:  # up to path, any sign of a model; above it, a saved model (config and weights)
            below_root = folder == root or root in folder.parents
            if _is_model_folder(folder) if below_root else _holds_a_model(folder):
                raise ValueError(f"python verifier: {file} lies in a model folder ({folder}); checker code is loaded "
                                 f"only from the user's own modules, never from a model folder")
        spec = importlib.util.spec_from_file_location(f"assocmem_user_checker_{module.replace('.', '_')}", file)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except (Exception, SystemExit) as err:  # the user's module: its failure is named, not a traceback of ours
            sys.modules.pop(spec.name, None)
            raise ValueError(f"python verifier {self.function}: importing {file} failed: {type(err).__name__}: "
                             f"{err}") from None
        fn = getattr(loaded, name, None)
        if not callable(fn):
            raise ValueError(f"python verifier: {file} defines no function {name!r}")
        return fn

    def grade(self, text: str, answer, info: dict):
        """The user's function on one response (its failure: a ValueError naming the function and the error)."""
        fn = self.fn
        try:
            return fn(text, answer, info)
        except (Exception, SystemExit) as err:
            raise ValueError(f"python verifier {self.function} (in {self.path}) failed on a response: "
                             f"{type(err).__name__}: {err}") from None

    def __call__(self, task, problems, responses):
        out = []
        for p, group in zip(problems, responses):
            row = []
            for r in group:
                value = self.grade(task.decode(r), _answer(task, r, None), dict(p.info))
                if not isinstance(value, (bool, int, float, np.floating, np.integer)) or not math.isfinite(value):
                    raise ValueError(f"python verifier {self.function} returned {type(value).__name__} {value!r:.40}; "
                                     f"it must return a finite number or a bool")
                row.append(float(value))
            out.append(row)
        return out


JUDGE_TEMPLATE = ("Question:\n{question}\n\nProposed solution:\n{response}\n\n"
                  "Is the proposed solution correct? Answer Yes or No.\nAnswer:")


class ModelJudge(_Spec):
    """A second local HF causal LM scores each response by p("Yes") after ``template``."""

    kind: Literal["model"] = "model"
    folder: str = Field(description="local HF model folder (save_pretrained) with its tokenizer")
    template: str = Field(JUDGE_TEMPLATE, description="judge prompt; fields {question}, {response}, {reference}")
    yes: str = Field(" Yes", description="the affirmative answer (one token of the judge's tokenizer)")
    no: str = Field(" No", description="the negative answer (one token)")
    score: Literal["yes_vs_no", "p_yes"] = Field("yes_vs_no", description="yes_vs_no: p(yes)/(p(yes)+p(no)); p_yes: p(yes)")
    chat_template: ChatTemplateOption = Field("auto", description="wrap the judge prompt in the judge "
                                                        "tokenizer's chat template (auto: when it has one)")
    batch_size: int = Field(16, ge=1, description="judge prompts per forward")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="where the judge runs")

    @field_validator("template")
    @classmethod
    def _fields(cls, template: str) -> str:
        if "{response}" not in template:
            raise ValueError("the judge template must contain '{response}' (and may use {question}, {reference})")
        try:
            template.format(question="", response="", reference="")
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"the judge template {template!r:.80} is not a format string over {{question}}, "
                             f"{{response}}, {{reference}} ({type(err).__name__}: {err}); write a literal brace as "
                             f"{{{{ or }}}}") from None
        return template

    @model_validator(mode="after")
    def _two_answers(self) -> "ModelJudge":
        if self.yes == self.no:
            raise ValueError(f"yes and no are the same text {self.yes!r}: the judge's score compares two different "
                             f"tokens (e.g. yes: ' Yes', no: ' No')")
        return self

    def load(self) -> "ModelJudge":
        self.loaded
        return self

    @cached_property
    def loaded(self):
        """(model, tokenizer, yes id, no id), loaded once (models/hf_load.py: no custom code)."""
        import torch

        from ...models.hf_load import load_causal_lm, load_hf_tokenizer

        folder = Path(self.folder)
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"model verifier {self.folder}: device: cuda, but torch sees no CUDA device; use device: "
                             f"auto (a GPU when there is one) or cpu")
        if not folder.is_dir():
            raise ValueError(f"model verifier: {self.folder} is not a local model folder (save_pretrained)")
        if not (folder / "config.json").is_file():
            raise ValueError(f"model verifier: {self.folder} holds no config.json, so it is not a model folder "
                             f"written by save_pretrained (with its tokenizer)")
        try:
            tokenizer = load_hf_tokenizer(self.folder, local_files_only=True)
            model = load_causal_lm(self.folder, local_files_only=True)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"model verifier: {self.folder} does not load as a causal LM with its tokenizer "
                             f"({type(err).__name__}: {err})") from None
        device = "cuda" if self.device == "auto" and torch.cuda.is_available() else (
            "cpu" if self.device == "auto" else self.device)
        model.to(device).eval()
        return (model, tokenizer, single_token(tokenizer, self.yes, "yes"), single_token(tokenizer, self.no, "no"))

    def prompt_ids(self, tokenizer, question: str, response: str, reference) -> list[int]:
        text = self.template.format(question=question, response=response, reference=reference)
        text = format_prompt(tokenizer, text, chat_template=self.chat_template)
        return tokenizer.encode(text, add_special_tokens=False)

    def __call__(self, task, problems, responses):
        model, tokenizer, yes_id, no_id = self.loaded
        prompts = [self.prompt_ids(tokenizer, p.info.get("question", task.decode(p.prompt)), task.decode(r),
                                   p.info.get("answer", "")) for p, group in zip(problems, responses) for r in group]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        flat = yes_scores(model, prompts, yes_id=yes_id, no_id=no_id, pad_id=pad, score=self.score,
                          batch_size=self.batch_size)
        sizes = np.cumsum([0] + [len(g) for g in responses])
        return [flat[a:b].tolist() for a, b in zip(sizes[:-1], sizes[1:])]


VerifierSpec = Annotated[Union[ExactMatch, NumericTolerance, PythonChecker, ModelJudge], Field(discriminator="kind")]
VERIFIER_KINDS: dict[str, type[_Spec]] = {"exact_match": ExactMatch, "numeric": NumericTolerance,
                                          "python": PythonChecker, "model": ModelJudge}


def compose(weights: dict[str, float], verifiers: dict[str, VerifierFn]) -> VerifierFn:
    """Σ_name weight · verifiers[name] (every name must be in ``verifiers``; weights finite)."""
    if not weights:
        raise ValueError("a weighted reward needs at least one {name: weight}")
    unknown = [n for n in weights if n not in verifiers]
    if unknown:
        raise ValueError(f"unknown reward/verifier {unknown}; known: {sorted(verifiers)} (define a verifier under "
                         f"'verifiers:' or register a reward)")
    bad = {n: w for n, w in weights.items() if not math.isfinite(float(w))}
    if bad:
        raise ValueError(f"reward weights must be finite numbers, got {bad}")

    def weighted(task, problems, responses):
        return sum(float(w) * np.asarray(verifiers[n](task, problems, responses), dtype=np.float64)
                   for n, w in weights.items())
    weighted.__doc__ = " + ".join(f"{w:g}·{n}" for n, w in weights.items())
    return weighted
