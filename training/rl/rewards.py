"""Rewards by registered name (no import strings in configs).

A reward function scores the G completions of each of P prompts at once:

    fn(task, problems, responses) -> array-like [P, G] of finite floats
        task       the verifiable task (its checker, ``candidates``, ``decode``)
        problems   the P problems (prompt, reference, info)
        responses  [P][G] token tuples, cut after the first EOS (kept)

``REWARDS`` is the explicit registry; ``register_reward(name, fn)`` adds a user's function (a name
that exists is refused). A config's reward is one name, or weights ``{name: weight}`` summed
(training/verifiable/verifiers.py ``compose``) over the registered names and the verifiers the
config defines (``rollout.verifiers``: exact_match, numeric, python, model; a defined name may not
shadow a registered one). ``score`` calls it and refuses a result of the wrong shape or holding
NaN / ±inf, naming the reward and where.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..verifiable import Checkable, Problem, score_response
from ..verifiable.verifiers import compose

RewardFn = Callable[[Checkable, Sequence[Problem], Sequence[Sequence[tuple[int, ...]]]], object]


def _checker(rule: str | None) -> RewardFn:
    def reward(task, problems, responses):
        return [[float(score_response(task, p, r, rule)[1]) for r in group] for p, group in zip(problems, responses)]
    which = f"the {rule!r} scoring rule" if rule else "the task's scoring rule (its default_rule; first for the token tasks)"
    reward.__doc__ = f"1 if the task's checker accepts the answer under {which}, else 0"
    return reward


def _states_an_answer(task, problems, responses):
    """1 if the response states at least one answer the task can read (a format reward), else 0."""
    return [[float(bool(task.candidates(r))) for r in group] for group in responses]


REWARDS: dict[str, RewardFn] = {"correct": _checker(None), "correct_last": _checker("last"),
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


def reward_fn(reward: str | dict[str, float], verifiers: dict[str, RewardFn] | None = None) -> RewardFn:
    """The function of a config's reward: a registered or defined name, or ``{name: weight}`` summed."""
    defined = dict(verifiers or {})
    clash = sorted(set(defined) & set(REWARDS))
    if clash:
        raise ValueError(f"rollout.verifiers: {clash} shadow registered rewards; name the verifiers otherwise "
                         f"(registered: {sorted(REWARDS)})")
    if isinstance(reward, str):
        return defined[reward] if reward in defined else get_reward(reward)
    return compose(dict(reward), {**REWARDS, **defined})


def score(name: str | dict[str, float], task: Checkable, problems: Sequence[Problem],
          responses: Sequence[Sequence[tuple[int, ...]]], verifiers: dict[str, RewardFn] | None = None) -> np.ndarray:
    """float64 [P, G] rewards of the reward ``name`` (``reward_fn``), checked (module docstring)."""
    want = (len(problems), len(responses[0]) if responses else 0)
    values = reward_fn(name, verifiers)(task, problems, responses)   # a verifier's own error passes as it is
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
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
