"""pass@k, maj@k, best-of-N and weighted vote against oracles written elsewhere or by brute force.

Oracles:
- ``human_eval_estimate_pass_at_k``: the per-problem estimator of openai/human-eval
  (human_eval/evaluation.py, ``estimate_pass_at_k.estimator``; Chen et al. 2021, the numerically
  stable product form), ported here as a formula.
- lm-evaluation-harness' ``TakeKFilter`` + ``MajorityVoteFilter`` (lm_eval/filters/selection.py) when
  the [eval] extra is installed; their semantics (first k, then ``Counter.most_common(1)``) otherwise.
- brute force: every k-subset (or every ordered k-tuple) of the samples.
"""
import itertools
from collections import Counter
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from assocmem.training.estimators import (best_of_n_expected, best_of_n_first, bootstrap_interval, maj_at_k_expected,
                                          maj_at_k_first, majority_vote, pass_at_k, weighted_vote,
                                          weighted_vote_expected, weighted_vote_first)


def human_eval_estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """openai/human-eval, human_eval/evaluation.py: 1 - prod(1 - k / arange(n - c + 1, n + 1))."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@pytest.mark.parametrize("n", [1, 2, 5, 16, 32, 100])
def test_pass_at_k_equals_human_eval(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert abs(pass_at_k(n, c, k) - human_eval_estimate_pass_at_k(n, c, k)) <= 1e-12, (n, c, k)


@pytest.mark.parametrize("n", [1, 3, 6, 9])
def test_pass_at_k_equals_enumeration_of_subsets(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            exact = Fraction(sum(any(correct[i] for i in s) for s in subsets), len(subsets))
            assert pass_at_k(n, c, k) == float(exact)
    assert pass_at_k(n, 0, 1) == 0.0 and pass_at_k(n, n, 1) == 1.0


def test_pass_at_k_edges_and_errors():
    assert pass_at_k(10, 3, 8) == 1.0                      # n − c < k: every 8-subset holds a correct one
    with pytest.raises(ValueError, match=r"k must be in 1..n = 1..4"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="correct samples c"):
        pass_at_k(4, 5, 1)


def _lm_eval_majority_of_first_k(answers, k):
    """lm-eval's take_first_k -> majority_vote when installed, else the same two steps by hand."""
    try:
        from lm_eval.filters.selection import MajorityVoteFilter, TakeKFilter
    except ImportError:
        return Counter(list(answers)[:k]).most_common(1)[0][0]
    first = list(TakeKFilter(k=k).apply([list(answers)], None))
    return list(MajorityVoteFilter().apply(first, None))[0][0]


def _random_case(rng, n):
    """Answers from a small alphabet with None (no answer); one or two correct answers."""
    alphabet = [None, "a", "b", "c", "d"][: rng.integers(2, 6)]
    answers = [alphabet[i] for i in rng.integers(len(alphabet), size=n)]
    good = {a for a in alphabet[1:] if rng.random() < 0.4}
    return answers, [a in good for a in answers]


def test_maj_at_k_first_is_lm_evals_take_first_k_then_majority_vote():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        answers, correct = _random_case(rng, n)
        for k in range(1, n + 1):
            winner = _lm_eval_majority_of_first_k(answers, k)
            assert maj_at_k_first(answers, correct, k) == float(winner is not None and correct[answers.index(winner)])
    assert majority_vote(["7", "3", "3", "7"]) == "7"      # a tie goes to the answer seen first
    assert maj_at_k_first([None, None, "1"], [False, False, True], 3) == 0.0   # "[invalid]" wins the vote


def _brute_force_majority(answers, correct, k):
    """Mean over every ordered k-tuple of distinct samples of [lm-eval's majority is correct]."""
    tuples = list(itertools.permutations(range(len(answers)), k))
    hits = 0
    for t in tuples:
        winner = Counter(answers[i] for i in t).most_common(1)[0][0]
        hits += winner is not None and correct[answers.index(winner)]
    return hits / len(tuples)


def test_maj_at_k_expected_equals_enumeration():
    rng = np.random.default_rng(1)
    for _ in range(60):
        n = int(rng.integers(1, 7))
        answers, correct = _random_case(rng, n)
        for k in range(1, n + 1):
            assert abs(maj_at_k_expected(answers, correct, k) - _brute_force_majority(answers, correct, k)) <= 1e-12


def test_maj_at_k_expected_edges():
    answers, correct = ["1", "2", "1", None, "1"], [True, False, True, False, True]
    assert maj_at_k_expected(answers, correct, 1) == pytest.approx(3 / 5, abs=1e-15)   # k = 1 is pass@1
    assert maj_at_k_expected(answers, correct, 5) == 1.0
    assert maj_at_k_expected(["1", "2"], [True, False], 2) == 0.5                     # a tie: each wins half
    assert maj_at_k_expected(["x"] * 32, [False] * 32, 16) == 0.0
    big = ["1"] * 12 + ["2"] * 10 + [None] * 10
    flags = [a == "1" for a in big]
    value = maj_at_k_expected(big, flags, 16)                                          # C(32, 16) = 6e8 subsets
    assert 0.0 < value < 1.0
    with pytest.raises(ValueError, match="both correct and wrong"):
        maj_at_k_expected(["1", "1"], [True, False], 1)


def _brute_force_best_of_n(scores, correct, k):
    """Mean over every k-subset; a tie at the top is split evenly among the tied samples."""
    total = Fraction(0)
    subsets = list(itertools.combinations(range(len(scores)), k))
    for s in subsets:
        top = max(scores[i] for i in s)
        tied = [i for i in s if scores[i] == top]
        total += Fraction(sum(correct[i] for i in tied), len(tied))
    return float(total / len(subsets))


def test_best_of_n_expected_equals_enumeration_with_ties():
    rng = np.random.default_rng(2)
    for _ in range(100):
        n = int(rng.integers(1, 9))
        scores = list(rng.integers(0, 4, size=n) / 2)       # few levels: many ties
        correct = list(rng.random(n) < 0.4)
        for k in range(1, n + 1):
            assert abs(best_of_n_expected(scores, correct, k) - _brute_force_best_of_n(scores, correct, k)) <= 1e-15


def test_best_of_n_with_the_checker_as_scorer_is_pass_at_k():
    rng = np.random.default_rng(3)
    for n in (1, 4, 16, 32):
        correct = list(rng.random(n) < 0.3)
        for k in range(1, n + 1):
            assert best_of_n_expected([float(c) for c in correct], correct, k) == pytest.approx(
                pass_at_k(n, sum(correct), k), abs=1e-15)
    assert best_of_n_first([0.1, 0.9, 0.9, 0.2], [False, True, False, False], 4) == 1.0   # first of the tied


def test_weighted_vote_first_and_expected():
    answers = ["1", "2", "2", None, "1", "3"]
    weights = [0.9, 0.3, 0.3, 5.0, 0.2, 0.5]
    correct = [a == "1" for a in answers]
    assert weighted_vote(answers, weights) == "1"             # 1.1 vs 0.6 vs 0.5; None never votes
    assert weighted_vote_first(answers, weights, correct, 3) == 1.0
    assert weighted_vote_first(answers, weights, correct, 2) == 1.0
    assert weighted_vote([None, None], [1.0, 1.0]) is None
    for k in range(1, 7):
        subsets = list(itertools.combinations(range(6), k))
        brute = np.mean([weighted_vote([answers[i] for i in s], [weights[i] for i in s]) == "1" for s in subsets])
        value, exact = weighted_vote_expected(answers, weights, correct, k)
        assert exact and abs(value - brute) <= 1e-15


def test_weighted_vote_expected_samples_when_there_are_too_many_subsets():
    rng = np.random.default_rng(4)
    answers = [str(a) for a in rng.integers(0, 3, size=24)]
    weights = list(rng.random(24))
    correct = [a == "0" for a in answers]
    exact, is_exact = weighted_vote_expected(answers, weights, correct, 4, max_subsets=comb(24, 4))
    sampled, sampled_exact = weighted_vote_expected(answers, weights, correct, 4, max_subsets=4000, seed=1)
    assert is_exact and not sampled_exact
    assert abs(sampled - exact) < 4 * np.sqrt(exact * (1 - exact) / 4000)


def test_bootstrap_interval():
    assert bootstrap_interval([0.5] * 30) == (0.5, 0.5)
    rng = np.random.default_rng(5)
    values = (rng.random(400) < 0.5).astype(float)
    low, high = bootstrap_interval(values, num_resamples=4000, seed=0)
    assert low < values.mean() < high
    assert high - low == pytest.approx(2 * 1.96 * np.sqrt(0.25 / 400), rel=0.1)   # normal approximation
    assert bootstrap_interval(values, seed=3) == bootstrap_interval(values, seed=3)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bootstrap_interval([])
