"""Estimators of sampled evaluation: pass@k, maj@k, best-of-N, weighted vote, bootstrap intervals.

Per problem, n samples were drawn; sample i has an extracted answer a_i (None when the response
states none), a correctness flag r_i and, for best-of-N, a score s_i. Every estimator returns the
value for one problem; a benchmark's number is the mean over problems.

- pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): the
  probability that a uniformly random k-subset of the n samples holds a correct one,
  1 − C(n−c, k)/C(n, k) with c correct samples, unbiased for the pass rate of k fresh samples.
- maj@k, two conventions:
  * ``maj_at_k_first``: lm-evaluation-harness' ``take_first_k`` then ``majority_vote``: the most
    common answer among the first k samples (``collections.Counter.most_common``: a tie goes to the
    answer seen first; a missing answer is a vote like lm-eval's "[invalid]", and never correct);
  * ``maj_at_k_expected``: the same vote on a uniformly random k-subset taken in random order,
    in expectation, computed exactly (a tie then goes to each tied answer with equal probability).
- best-of-N@k: the highest-scoring of k samples decides (``best_of_n_first`` / ``_expected``);
  with the checker as scorer it equals pass@k.
- weighted vote@k: every answer collects the weights of its samples; the heaviest answer wins
  (first k samples; or the expectation over random k-subsets, by enumeration when there are at
  most ``max_subsets`` of them, else over ``max_subsets`` random subsets).
- ``bootstrap_interval``: percentile interval of the mean over problems, problems resampled.
"""
from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction
from math import comb
from typing import Hashable, Sequence

import numpy as np


def _check_k(n: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..n = 1..{n} (there are {n} samples per problem), got k={k}")


# ---------------------------------------------------------------- pass@k
def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n−c, k)/C(n, k) for c correct of n samples (exact integer binomials, then one rounding)."""
    if not 0 <= c <= n:
        raise ValueError(f"the number of correct samples c must be in 0..n = 0..{n}, got {c}")
    _check_k(n, k)
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


# ---------------------------------------------------------------- maj@k
def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """The most common answer; ties go to the one seen first (lm-eval's ``majority_vote``)."""
    if not answers:
        raise ValueError("majority_vote needs at least one answer")
    return Counter(answers).most_common(1)[0][0]


def correct_of(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> dict[Hashable | None, bool]:
    """Correctness of each distinct answer, in order of first appearance (None is never correct)."""
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness flags")
    flags: dict[Hashable | None, bool] = {}
    for a, r in zip(answers, correct):
        r = bool(r) and a is not None
        if flags.setdefault(a, r) != r:
            raise ValueError(f"answer {a!r} is marked both correct and wrong; correctness must be a function "
                             f"of the answer")
    return flags


def maj_at_k_first(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """1.0 if the majority of the first k answers is a correct one, else 0.0."""
    _check_k(len(answers), k)
    return float(correct_of(answers, correct)[majority_vote(answers[:k])])


def _win_probability(counts: list[int], g: int, k: int) -> float:
    """P(answer g wins the vote of a random k-subset in random order).

    Σ_t C(c_g, t) · Σ_a W_t(a) / (a + 1) / C(n, k), where W_t(a) counts the ways the other answers
    fill the remaining k − t draws with none above t and exactly a of them at t (the a + 1 tied
    answers each win with probability 1/(a + 1), by symmetry of the random order).
    """
    others = [c for h, c in enumerate(counts) if h != g]
    total = 0.0
    for t in range(1, min(counts[g], k) + 1):
        rest = k - t
        ways = np.zeros((len(others) + 1, rest + 1))              # [a, s]: a others at t, s draws used
        ways[0, 0] = 1.0
        for c in others:
            new = np.zeros_like(ways)
            for j in range(0, min(c, t, rest) + 1):
                w = comb(c, j)
                if j < t:
                    new[:, j:] += w * ways[:, :rest + 1 - j]
                else:
                    new[1:, j:] += w * ways[:-1, :rest + 1 - j]
            ways = new
        total += comb(counts[g], t) * float(np.sum(ways[:, rest] / np.arange(1, len(others) + 2)))
    return total / comb(sum(counts), k)


def maj_at_k_expected(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """E[majority of a uniformly random k-subset, in random order, is correct] (exact)."""
    _check_k(len(answers), k)
    flags = correct_of(answers, correct)
    counts = [Counter(answers)[a] for a in flags]
    return float(sum(_win_probability(counts, g, k) for g, ok in enumerate(flags.values()) if ok))


# ---------------------------------------------------------------- best-of-N
def best_of_n_first(scores: Sequence[float], correct: Sequence[bool], k: int) -> float:
    """Correctness of the highest-scoring of the first k samples (ties: the first of them)."""
    _check_k(len(scores), k)
    return float(bool(correct[int(np.argmax(np.asarray(scores[:k], dtype=np.float64)))]))


def best_of_n_expected(scores: Sequence[float], correct: Sequence[bool], k: int) -> float:
    """E[the highest-scoring sample of a random k-subset is correct], ties broken uniformly (exact).

    With the samples' scores in levels ℓ (descending), r_ℓ samples above level ℓ and g_ℓ at it,
    P(the best drawn score is level ℓ) = [C(n − r_ℓ, k) − C(n − r_ℓ − g_ℓ, k)] / C(n, k), and each
    drawn sample of that level is the pick with equal probability.
    """
    n = len(scores)
    _check_k(n, k)
    values = np.asarray(scores, dtype=np.float64)
    flags = np.asarray(correct, dtype=bool)
    total, above = Fraction(0), 0
    for level in np.unique(values)[::-1]:
        members = values == level
        g = int(members.sum())
        p_level = Fraction(comb(n - above, k) - comb(n - above - g, k), comb(n, k))
        total += p_level * Fraction(int(flags[members].sum()), g)
        above += g
    return float(total)


# ---------------------------------------------------------------- weighted vote
def weighted_vote(answers: Sequence[Hashable | None], weights: Sequence[float]) -> Hashable | None:
    """The answer with the largest total weight; ties go to the one seen first; None never wins
    unless no sample has an answer."""
    totals: dict[Hashable, float] = {}
    for a, w in zip(answers, weights):
        if a is not None:
            totals[a] = totals.get(a, 0.0) + float(w)
    if not totals:
        return None
    best = max(totals.values())
    return next(a for a, v in totals.items() if v == best)


def weighted_vote_first(answers: Sequence[Hashable | None], weights: Sequence[float], correct: Sequence[bool],
                        k: int) -> float:
    """1.0 if the weighted vote of the first k samples picks a correct answer."""
    _check_k(len(answers), k)
    winner = weighted_vote(answers[:k], weights[:k])
    return float(winner is not None and correct_of(answers, correct)[winner])


def weighted_vote_expected(answers: Sequence[Hashable | None], weights: Sequence[float], correct: Sequence[bool],
                           k: int, *, max_subsets: int = 5000, seed: int = 0) -> tuple[float, bool]:
    """(E[the weighted vote of a random k-subset is correct], exact?): every subset when there are at
    most ``max_subsets``, else the mean over ``max_subsets`` uniform random subsets.

    Vectorised: with X [S, n] the subsets' indicator rows and M [n, G] each sample's weight in its
    answer's column, X M [S, G] holds every subset's totals. A tie between totals (measure zero for
    continuous weights) goes to the answer that appears first in the whole sample list.
    """
    n = len(answers)
    _check_k(n, k)
    flags = correct_of(answers, correct)
    groups = [a for a in flags if a is not None]
    if not groups:
        return 0.0, True
    column = {a: j for j, a in enumerate(groups)}
    totals = np.zeros((n, len(groups)))                                          # M [n, G]
    for i, (a, w) in enumerate(zip(answers, weights)):
        if a is not None:
            totals[i, column[a]] = float(w)
    exact = comb(n, k) <= max_subsets
    if exact:
        subsets = np.array(list(itertools.combinations(range(n), k)), dtype=np.int64)      # [S, k]
    else:
        subsets = np.random.default_rng(seed).random((max_subsets, n)).argsort(axis=1)[:, :k]
    member = np.zeros((len(subsets), n))
    np.put_along_axis(member, subsets, 1.0, axis=1)                              # X [S, n]
    voted = member @ (totals > 0).astype(float)                                  # [S, G] voters per answer
    winner = (member @ totals).argmax(axis=1)                                    # [S]
    has_answer = voted.sum(axis=1) > 0
    good = np.array([flags[a] for a in groups])
    return float(np.mean(good[winner] & has_answer)), exact


# ---------------------------------------------------------------- intervals
def bootstrap_interval(values: Sequence[float] | np.ndarray, *, num_resamples: int = 1000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-problem ``values`` [P] (problems resampled
    with replacement ``num_resamples`` times)."""
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1 or data.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array of per-problem scores, got shape {data.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(data.size, size=(num_resamples, data.size))].mean(axis=1)   # [B]
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)
