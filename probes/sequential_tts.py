"""Sequential test-time scaling (thesis §3.5): generate, check, revise, and the tokens it costs.

Each problem runs ``chains`` independent chains. A chain is, for rounds r = 0 … R:

    r = 0      y₀ ~ policy(x)                                      generated: |y₀|
    r >= 1     check y_{r−1}:
                 self      s = p(yes | x y_{r−1} v) of the policy itself, v = the verify prompt   generated: 1
                           (the one verdict token it reads, judge.py)
                 verifier  s = the verifier's score of y_{r−1} (a reward function:               generated: 0
                           verifiers.py; the policy generates nothing)
               s >= threshold: the chain stops and keeps y_{r−1}
               else y_r ~ policy(x y_{r−1} c), c = the revision prompt                      generated: |y_r|

(y without its EOS inside a longer context). The thesis' refinement reads the model's own written
critique; here the critique is the check's verdict (a rejected response is followed by the revision
prompt), so a round costs one response, not a critique and a response. After every round each chain's current answer is graded
with the task's checker; the curve is accuracy against the mean tokens the policy generated per
chain so far (the equal-compute axis, the same count as the parallel curves': k samples cost the
sum of their lengths). Draws are seeded per round (``seed + round``). ``Policy`` is what the rounds
need from a model (``HFPolicy`` wraps an HF causal LM; tests script a fake one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from assocmem.training.generation import SamplingSettings, sample_completions
from assocmem.training.verifiable import Checkable, Problem, score_response
from assocmem.training.verifiable.judge import yes_scores

CHECKS = ("self", "verifier")


class Policy(Protocol):
    def generate(self, prompts: Sequence[tuple[int, ...]], seed: int) -> list[tuple[int, ...]]:
        """One response per prompt, cut after its first EOS (kept)."""
        ...

    def yes_scores(self, prompts: Sequence[tuple[int, ...]]) -> np.ndarray:
        """p(yes) (or the yes/no odds) of the next token after each prompt, [N]."""
        ...


@dataclass
class HFPolicy:
    """An HF causal LM as a ``Policy``: ``sample_completions`` (one sample per row) and judge.py's reading."""

    model: object
    settings: SamplingSettings
    eos_id: int | None
    pad_id: int
    yes_id: int
    no_id: int

    def generate(self, prompts, seed):
        settings = self.settings.model_copy(update={"num_samples": 1, "seed": seed})
        out = sample_completions(self.model, list(prompts), settings, eos_token_id=self.eos_id,
                                 pad_token_id=self.pad_id)
        return [row[0] for row in out.responses]

    def yes_scores(self, prompts):
        return yes_scores(self.model, list(prompts), yes_id=self.yes_id, no_id=self.no_id, pad_id=self.pad_id,
                          batch_size=self.settings.batch_size)


@dataclass
class Chain:
    """One chain: its current response, tokens generated so far, whether a check accepted it."""

    problem: int
    response: tuple[int, ...] = ()
    tokens: int = 0
    stopped: bool = False
    history: list[dict] = field(default_factory=list)   # per round: answer, correct, tokens, score


def _body(response: tuple[int, ...], eos: int | None) -> tuple[int, ...]:
    return response[:-1] if eos is not None and response and response[-1] == eos else response


def run_sequential(policy: Policy, task: Checkable, problems: Sequence[Problem], *, chains: int, rounds: int,
                   check: str, revise_ids: Sequence[int], verify_ids: Sequence[int] = (),
                   verifier: Callable | None = None, threshold: float = 0.5, seed: int = 0,
                   rule: str | None = None) -> dict:
    """Run the rounds (module docstring); returns the JSON-able report with the curve and every chain."""
    if check not in CHECKS:
        raise ValueError(f"unknown check {check!r}; choose one of {list(CHECKS)}")
    if check == "verifier" and verifier is None:
        raise ValueError("check: verifier needs a verifier (--verifier NAME[=WEIGHT]); or check with the model itself "
                         "(self)")
    if check == "self" and not verify_ids:
        raise ValueError("check: self needs the verify prompt's token ids (verify_ids)")
    if chains < 1 or rounds < 0:
        raise ValueError(f"chains must be >= 1 and rounds >= 0, got chains={chains}, rounds={rounds}")
    eos = task.eos_id
    state = [Chain(problem=i) for i in range(len(problems)) for _ in range(chains)]
    for r in range(rounds + 1):
        scores = {}
        if r > 0:
            scores = _check(policy, task, problems, state, check, verifier, verify_ids, eos)
            for c, s in scores.items():
                state[c].stopped = s >= threshold
        active = [c for c, chain in enumerate(state) if not chain.stopped]
        prompts = [problems[state[c].problem].prompt + (_body(state[c].response, eos) + tuple(revise_ids) if r else ())
                   for c in active]
        for c, response in zip(active, policy.generate(prompts, seed + r) if prompts else []):
            state[c].response = tuple(int(t) for t in response)
            state[c].tokens += len(response)
        for c, chain in enumerate(state):
            answer, ok = score_response(task, problems[chain.problem], chain.response, rule)
            chain.history.append({"answer": None if answer is None else str(answer), "correct": bool(ok),
                                  "tokens": chain.tokens, "score": scores.get(c)})
    return sequential_report(state, problems, chains, rounds, check=check, threshold=threshold)


def _check(policy, task, problems, state, check, verifier, verify_ids, eos) -> dict[int, float]:
    """Scores of the chains still running; a self-check costs each one generated token."""
    running = [c for c, chain in enumerate(state) if not chain.stopped]
    if not running:
        return {}
    if check == "self":
        prompts = [problems[state[c].problem].prompt + _body(state[c].response, eos) + tuple(verify_ids)
                   for c in running]
        values = np.asarray(policy.yes_scores(prompts), dtype=np.float64)
        for c in running:
            state[c].tokens += 1
    else:
        values = np.array([float(np.asarray(verifier(task, [problems[state[c].problem]], [[state[c].response]]),
                                            dtype=np.float64).reshape(-1)[0]) for c in running])
    return dict(zip(running, values.tolist()))


def sequential_report(state: Sequence[Chain], problems: Sequence[Problem], chains: int, rounds: int, *,
                      check: str, threshold: float) -> dict:
    """Per round: accuracy (mean over problems of the mean over chains), mean tokens per chain, the
    fraction of chains a check has stopped."""
    correct = np.array([[h["correct"] for h in c.history] for c in state], dtype=np.float64)     # [C, R+1]
    tokens = np.array([[h["tokens"] for h in c.history] for c in state], dtype=np.float64)
    per_problem = correct.reshape(len(problems), chains, rounds + 1).mean(1)                     # [P, R+1]
    stopped = np.array([[h["score"] is not None and h["score"] >= threshold for h in c.history] for c in state])
    return {"check": check, "threshold": threshold, "chains": chains, "rounds": list(range(rounds + 1)),
            "accuracy": per_problem.mean(0).tolist(), "tokens": tokens.mean(0).tolist(),
            "stopped": np.maximum.accumulate(stopped, axis=1).mean(0).tolist(),
            "per_problem_accuracy": per_problem.tolist(),
            "chains_detail": [{"problem": c.problem, "rounds": c.history} for c in state]}
