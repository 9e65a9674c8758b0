"""A process verifier for the demonstration's word problems (a ``python`` verifier: ``check_steps:grade``).

It reads the worked solution, never the reference answer: the solution passes when it has one line
"a ± b = c" per event of the question, each line starts from the previous result (the first from the
question's first count), takes the question's next number as b, computes c correctly, and the last
line "#### n" states the last c. What it cannot see is the direction of an event: a solution that
adds where the question takes away passes if its sums are right, so it is a verifier with false
positives, as a learned one would be.
"""
from __future__ import annotations

import re

STEP = re.compile(r"^(\d+) ([+-]) (\d+) = (\d+)$")
FINAL = re.compile(r"^#### (\d+)$")


def grade(response_text: str, answer, info: dict) -> float:
    """1.0 if the solution's steps are consistent with the question (module docstring), else 0.0."""
    numbers = [int(x) for x in re.findall(r"\d+", info["question"])]
    lines = response_text.strip().split("\n")
    if len(lines) != len(numbers) or not FINAL.match(lines[-1]):
        return 0.0
    count = numbers[0]
    for line, amount in zip(lines[:-1], numbers[1:]):
        step = STEP.match(line)
        if step is None:
            return 0.0
        left, op, right, result = int(step[1]), step[2], int(step[3]), int(step[4])
        if left != count or right != amount or result != (left + right if op == "+" else left - right):
            return 0.0
        count = result
    return float(int(FINAL.match(lines[-1])[1]) == count)
