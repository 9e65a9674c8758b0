"""Verifiable tasks: problem generators with checkers, for training (prompt + reference, loss on
the reference) and for sampling-based evaluation (probes/test_time_scaling.py).

    chain_sum.py     running sums mod 10 with a scratchpad, the answer after a marker
    graph_path.py    a path between two nodes of a random graph written in context
    modular.py       (a ∘ b) mod p in Nanda et al.'s layout, with Nanda's train/test split
    needle.py        key → value needles in a random-id haystack, a query at the end (the NIAH probe's layout)
    text_answers.py  a problem set from a local file (JSONL/JSON/parquet), checked by answer extraction
    extract.py       answer extractors by registered name (boxed, gsm8k, last_number, multiple_choice) and
                     the normal form of answers (numbers, fractions, LaTeX)
    problem_file.py  ProblemsFile: the config section naming a problem file (train, rl, eval, probe tts)
    verifiers.py     verifiers by kind (exact match, numeric tolerance, Python function, judge model),
                     composed with weights
    base.py          Problem, scoring rules (first / last / strict), training rows

``TASKS`` is the explicit registry of the token-level tasks; ``get_task(name, **params)``.
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .base import (RULES, Checkable, Problem, VerifiableTask, problems_dataset, score_response, select_answer,
                   task_rule)
from .chain_sum import ChainSum
from .graph_path import GraphPath
from .modular import Modular
from .needle import Needle
from .extract import (EXTRACTORS, extract_answers, extract_hash_answers, is_equivalent, normalize_answer,
                      normalize_number)
from .problem_file import ProblemsFile
from .text_answers import TextAnswers, format_prompt

TASKS: dict[str, type[VerifiableTask]] = {"chain_sum": ChainSum, "graph_path": GraphPath, "modular": Modular,
                                          "needle": Needle}


def get_task(name: str, **params: Any) -> VerifiableTask:
    """The task ``name`` with its parameters (pydantic-validated; unknown ones are refused)."""
    if name not in TASKS:
        raise ValueError(f"unknown verifiable task {name!r}; tasks with a checker: {list(TASKS)}")
    try:
        return TASKS[name].model_validate(params)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"task {name}: {problems} (parameters of {name}: {list(TASKS[name].model_fields)})") from None


def problem_sets(data: VerifiableTask) -> tuple[list[Problem], list[Problem]]:
    """(train, eval) problems of a TrainConfig data section of a verifiable kind: Nanda's split for
    ``modular``, else ``num_train`` problems from ``seed`` and ``num_eval`` from ``eval_seed``."""
    if isinstance(data, Modular):
        return data.split(data.seed)
    if isinstance(data, ProblemsFile):
        return data.split()
    held_out = data.problems(data.num_eval, seed=data.eval_seed) if data.num_eval > 0 else []
    return data.problems(data.num_train, seed=data.seed), held_out


__all__ = ["TASKS", "RULES", "Checkable", "Problem", "VerifiableTask", "ChainSum", "GraphPath", "Modular", "Needle",
           "TextAnswers", "get_task", "problem_sets", "problems_dataset", "score_response", "select_answer",
           "extract_hash_answers", "normalize_number", "EXTRACTORS", "extract_answers", "is_equivalent",
           "normalize_answer", "ProblemsFile", "format_prompt", "task_rule"]
