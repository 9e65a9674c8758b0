"""Test-time scaling (thesis §3.5): sample n completions per problem, grade them with the task's
checker, and report accuracy against the number k of samples used.

    report = run_tts(model, task, problems, SamplingSettings(num_samples=32, temperature=1.0), ks=[1, 2, 4, 8, 16, 32])
    save_tts_figure(report, "tts.png")

Steps:
  1. ``sample_completions`` draws n responses per prompt in batches through generate() with the
     cache, with the log-probability of every response under the model (training/generation.py);
  2. every response is graded under a scoring rule (first / last / strict; training/verifiable/base.py):
     its answer, and whether the checker accepts it;
  3. each metric of ``METRICS`` is computed per problem and per k (training/estimators.py), then
     averaged over problems with a percentile bootstrap interval (problems resampled).

The metrics (one table, ``METRICS``): pass@k (Chen et al. 2021, unbiased), maj@k over the first
k samples (lm-evaluation-harness) and over random k-subsets (exact expectation), best-of-N@k with
the mean token log-probability or the checker as the score (the checker makes it pass@k), and the
vote weighted by exp(mean token log-probability). pass@1 is also given under every scoring rule,
so the cost of Nautile's strict rule (more than one candidate answer is wrong) is visible.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Sequence

import numpy as np

from assocmem.training.estimators import (best_of_n_expected, bootstrap_interval, maj_at_k_expected, maj_at_k_first,
                                          pass_at_k, weighted_vote_expected, weighted_vote_first)
from assocmem.training.generation import Completions, SamplingSettings, check_context, sample_completions
from assocmem.training.verifiable import RULES, Checkable, Problem, score_response, task_rule

from .plotting import ACCURACY_LIMITS, CurvePanel, save_curve_panels


@dataclass
class Graded:
    """The n samples of one problem, graded."""

    answers: list[Hashable | None]
    correct: list[bool]
    logprob_mean: list[float]
    verifier: list[float] | None = None      # the verifier's score of each sample (best-of-N by verifier)

    @property
    def weights(self) -> list[float]:
        """Vote weights: the geometric-mean token probability exp(mean log p) of each sample."""
        return [float(np.exp(v)) for v in self.logprob_mean]


Metric = Callable[[Graded, int], float]
METRICS: dict[str, Metric] = {
    "pass@k": lambda g, k: pass_at_k(len(g.correct), sum(g.correct), k),
    "maj@k (first k)": lambda g, k: maj_at_k_first(g.answers, g.correct, k),
    "maj@k (random k)": lambda g, k: maj_at_k_expected(g.answers, g.correct, k),
    "best-of-N@k (mean log-prob)": lambda g, k: best_of_n_expected(g.logprob_mean, g.correct, k),
    "best-of-N@k (checker)": lambda g, k: best_of_n_expected([float(c) for c in g.correct], g.correct, k),
    "weighted vote@k (first k)": lambda g, k: weighted_vote_first(g.answers, g.weights, g.correct, k),
    "weighted vote@k (random k)": lambda g, k: weighted_vote_expected(g.answers, g.weights, g.correct, k,
                                                                      max_subsets=1000)[0],
}
VERIFIER_METRICS: dict[str, Metric] = {   # with a verifier (thesis §3.5: "the final answer is the best one, as
    "best-of-N@k (verifier)": lambda g, k: best_of_n_expected(g.verifier, g.correct, k),   # decided by the verifier")
    "weighted vote@k (verifier)": lambda g, k: weighted_vote_expected(g.answers, g.verifier, g.correct, k,
                                                                      max_subsets=1000)[0],
}
PLOTTED = [m for m in METRICS if m != "best-of-N@k (checker)"] + list(VERIFIER_METRICS)   # checker = pass@k


def default_ks(n: int) -> list[int]:
    """1, 2, 4, … up to n, and n itself."""
    ks = [2 ** i for i in range(n.bit_length()) if 2 ** i <= n]
    return ks if ks[-1] == n else ks + [n]


def grade(task: Checkable, problems: Sequence[Problem], completions: Completions, rule: str | None,
          verifier: Callable | None = None) -> list[Graded]:
    """Answer and correctness of every sample under ``rule``; the verifier's scores when one is given."""
    graded = []
    scores = (np.asarray(verifier(task, problems, completions.responses), dtype=np.float64)
              if verifier is not None else None)                                          # [P, n]
    for i, problem in enumerate(problems):
        scored = [score_response(task, problem, r, rule) for r in completions.responses[i]]
        means = completions.logprob_mean[i] if completions.logprob_sum is not None else np.zeros(len(scored))
        graded.append(Graded([a for a, _ in scored], [ok for _, ok in scored], [float(v) for v in means],
                             None if scores is None else scores[i].tolist()))
    return graded


def curves(graded: Sequence[Graded], ks: Sequence[int], *, num_resamples: int = 1000, seed: int = 0) -> dict:
    """Per metric: mean over problems and bootstrap interval at every k."""
    out = {}
    table = {**METRICS, **(VERIFIER_METRICS if graded and graded[0].verifier is not None else {})}
    for name, metric in table.items():
        values = np.array([[metric(g, k) for k in ks] for g in graded])          # [P, K]
        intervals = [bootstrap_interval(values[:, j], num_resamples=num_resamples, seed=seed) for j in range(len(ks))]
        out[name] = {"k": list(ks), "mean": values.mean(0).tolist(), "low": [lo for lo, _ in intervals],
                     "high": [hi for _, hi in intervals]}
    return out


def _check_ks(ks: Sequence[int], n: int) -> None:
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ValueError(f"every k must be in 1..n = 1..{n} samples per problem; got {bad} (raise --samples or "
                         f"drop those k)")


def run_tts(model, task: Checkable, problems: Sequence[Problem], settings: SamplingSettings, *,
            ks: Sequence[int] | None = None, rule: str | None = None, num_resamples: int = 1000,
            verifier: Callable | None = None, report: Callable[[str], None] | None = None) -> dict:
    """Sample, grade and summarise (see the module docstring); returns the JSON-able report with
    ``samples`` (per problem) for ``save_samples``. ``rule`` None: the task's (``task_rule``);
    ``verifier`` (verifiers.py, a reward function): best-of-N and weighted vote by its scores.
    ``tokens`` [K]: the mean tokens k samples generate per problem, k × the mean response length
    (the equal-compute axis). ``report`` hears each sampling batch."""
    n = settings.num_samples
    ks = list(ks) if ks else default_ks(n)
    _check_ks(ks, n)
    rule = task_rule(task, rule)
    if rule not in RULES:
        raise ValueError(f"unknown scoring rule {rule!r}; choose one of {list(RULES)}")
    longest = max(len(p.prompt) for p in problems) + settings.max_new_tokens
    flags = check_context(model, longest, "the longest prompt + max_new_tokens")
    completions = sample_completions(model, [p.prompt for p in problems], settings, eos_token_id=task.eos_id,
                                     pad_token_id=task.pad_id, logprobs=True, report=report)
    graded = grade(task, problems, completions, rule, verifier)
    by_rule = {r: float(np.mean([np.mean(g.correct) for g in grade(task, problems, completions, r)])) for r in RULES}
    return {
        "settings": settings.model_dump(), "rule": rule, "num_problems": len(problems), "ks": ks, "flags": flags,
        "pass@1 by rule": by_rule,
        "finished": float(completions.finished.mean()),
        "mean response tokens": float(completions.num_tokens.mean()),
        "tokens": [k * float(completions.num_tokens.mean()) for k in ks],
        "metrics": curves(graded, ks, num_resamples=num_resamples, seed=settings.seed),
        "samples": [{"prompt": task.decode(p.prompt), "reference": task.decode(p.reference),
                     "responses": [task.decode(r) for r in completions.responses[i]],
                     "answers": [None if a is None else str(a) for a in g.answers], "correct": g.correct,
                     "logprob_mean": g.logprob_mean, **({"verifier": g.verifier} if g.verifier is not None else {})}
                    for i, (p, g) in enumerate(zip(problems, graded))],
    }


def save_samples(report: dict, path: str | Path) -> Path:
    """One JSON line per problem: prompt, reference, responses, answers, correctness, scores."""
    path = Path(path)
    path.write_text("".join(json.dumps(s) + "\n" for s in report["samples"]))
    return path


def save_tts_figure(report: dict, path: str | Path, title: str = "") -> Path:
    """Accuracy against k (log₂ axis), one curve per metric with its bootstrap band."""
    metrics = report["metrics"]
    plotted = [m for m in PLOTTED if m in metrics]
    label = {m: ("pass@k (= best-of-N, checker)" if m == "pass@k" else m) for m in plotted}
    panel = CurvePanel(title or f"{report['num_problems']} problems × n = {report['settings']['num_samples']} "
                       f"(rule: {report['rule']})", "k samples per problem", "accuracy (fraction of problems)",
                       {label[m]: (metrics[m]["k"], metrics[m]["mean"]) for m in plotted},
                       bands={label[m]: (metrics[m]["low"], metrics[m]["high"]) for m in plotted}, logx_base=2,
                       ylim=ACCURACY_LIMITS)
    return save_curve_panels(path, [panel])


EQUAL_COMPUTE = ("pass@k", "maj@k (random k)", "best-of-N@k (mean log-prob)", "best-of-N@k (verifier)")


def save_equal_compute_figure(parallel: dict | None, sequential: dict | None, path: str | Path,
                              title: str = "") -> Path:
    """Accuracy against tokens generated per problem: the parallel metrics at k samples (k × mean length)
    and the sequential rounds (mean tokens per chain after each round)."""
    series = {}
    if parallel is not None:
        for m in EQUAL_COMPUTE:
            if m in parallel["metrics"]:
                series[f"parallel {m}"] = (parallel["tokens"], parallel["metrics"][m]["mean"])
    if sequential is not None:
        series[f"sequential ({sequential['check']} check), rounds 0..{sequential['rounds'][-1]}"] = (
            sequential["tokens"], sequential["accuracy"])
    panel = CurvePanel(title or "equal compute", "tokens generated per problem", "accuracy (fraction of problems)",
                       series, logx_base=2, ylim=ACCURACY_LIMITS)
    return save_curve_panels(path, [panel])
