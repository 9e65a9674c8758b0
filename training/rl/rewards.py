"""Rewards by registered name (no import strings in configs).

A reward function scores the G completions of each of P prompts at once:

    fn(task, problems, responses) -> array-like [P, G] of finite floats
        task       the verifiable task (its checker, ``candidates``, ``decode``)
        problems   the P problems (prompt, reference, info)
        responses  [P][G] token tuples, cut after the first EOS (kept)

``REWARDS`` is the explicit registry; ``register_reward(name, fn)`` adds a user's function (a name
that exists is refused). ``score`` calls one and refuses a result of the wrong shape or holding
NaN / ±inf, naming the reward and where.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..verifiable import Checkable, Problem, score_response

RewardFn = Callable[[Checkable, Sequence[Problem], Sequence[Sequence[tuple[int, ...]]]], object]


def _checker(rule: str) -> RewardFn:
    def reward(task, problems, responses):
        return [[float(score_response(task, p, r, rule)[1]) for r in group] for p, group in zip(problems, responses)]
    reward.__doc__ = f"1 if the task's checker accepts the answer under the {rule!r} scoring rule, else 0"
    return reward


def _states_an_answer(task, problems, responses):
    """1 if the response states at least one answer the task can read (a format reward), else 0."""
    return [[float(bool(task.candidates(r))) for r in group] for group in responses]


REWARDS: dict[str, RewardFn] = {"correct": _checker("first"), "correct_last": _checker("last"),
                                "correct_strict": _checker("strict"), "states_an_answer": _states_an_answer}


def register_reward(name: str, fn: RewardFn) -> None:
    """Add ``fn`` to the registry under ``name`` (refused if the name is taken)."""
    if name in REWARDS:
        raise ValueError(f"a reward named {name!r} is already registered; choose another name "
                         f"(registered: {sorted(REWARDS)})")
    if not callable(fn):
        raise TypeError(f"reward {name!r} must be callable, got {type(fn).__name__}")
    REWARDS[name] = fn


def get_reward(name: str) -> RewardFn:
    if name not in REWARDS:
        raise ValueError(f"rollout.reward: unknown reward {name!r}; registered rewards: {sorted(REWARDS)} "
                         f"(add one with assocmem.training.rl.register_reward)")
    return REWARDS[name]


def score(name: str, task: Checkable, problems: Sequence[Problem],
          responses: Sequence[Sequence[tuple[int, ...]]]) -> np.ndarray:
    """float64 [P, G] rewards of the registered reward ``name``, checked (module docstring)."""
    want = (len(problems), len(responses[0]) if responses else 0)
    try:
        out = np.asarray(get_reward(name)(task, problems, responses), dtype=np.float64)
    except (TypeError, ValueError) as err:
        if "rollout.reward" in str(err):
            raise
        raise ValueError(f"rollout.reward {name!r} returned something that is not a [prompts, G] array of numbers "
                         f"({type(err).__name__}: {err})") from None
    if out.shape != want:
        raise ValueError(f"rollout.reward {name!r} returned shape {out.shape} for {want[0]} prompts × {want[1]} "
                         f"completions; it must return one number per completion, shape {want}")
    bad = np.argwhere(~np.isfinite(out))
    if len(bad):
        i, j = bad[0]
        raise ValueError(f"rollout.reward {name!r} returned {out[i, j]} for completion {j} of prompt {i} "
                         f"({len(bad)} non-finite values); rewards must be finite numbers")
    return out
