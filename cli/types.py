"""argparse types for the numbers of every ``assocmem`` command (a bad value is refused by argparse,
which names the flag: ``argument --seq-len: must be an integer >= 1, got '-5'``, exit status 2).

    positive_int       counts and sizes: an integer >= 1
    non_negative_int   an integer >= 0
    finite_float       a real number, not NaN or ±inf
    positive_float     a finite real number > 0
    non_negative_float a finite real number >= 0
    seed_int           a seed: an integer from 0 to 2**32 - 1 (numpy's range)
    probability        a number in (0, 1] (a nucleus mass)

Plain stdlib, so a parser that uses them stays cheap to build.
"""
from __future__ import annotations

import argparse
import math

__all__ = ["positive_int", "non_negative_int", "finite_float", "positive_float", "non_negative_float", "seed_int",
           "probability"]
SEED_LIMIT = 2**32


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def finite_float(text: str) -> float:
    """A real number that is not NaN or ±inf."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite real number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def probability(text: str) -> float:
    """A number in (0, 1]."""
    value = finite_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite real number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def seed_int(text: str) -> int:
    """A seed: an integer from 0 to 2**32 - 1 (what numpy, torch and Python's random all take)."""
    value = _int_at_least(text, 0)
    if value >= SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be a seed from 0 to {SEED_LIMIT - 1}, got {text!r}")
    return value
