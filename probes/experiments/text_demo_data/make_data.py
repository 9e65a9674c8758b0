"""Writes the text demonstration's data (README.md here): ``python make_data.py [FOLDER]``.

Every template below was written for this project; the files are generated from them with a fixed
seed, so running the script again rewrites the same bytes (a test checks it).

    train.jsonl   word problems {"question", "answer"}: a start count and one or two events that add
                  or take away, the answer a worked solution in GSM8K's format (one line per step,
                  last line "#### <number>"); after them, revision records: the question, a wrong
                  solution and REVISE, answered by the right solution (what a revision round asks)
    test.jsonl    held-out problems, drawn after the training ones (no question of the training set)
    corpus.txt    paragraphs of the same small world told as prose, counts included, for pre-training

The problems are toy-sized on purpose: a byte-level model of a few ten thousand parameters learns
part of them in a minute of CPU, so supervised fine-tuning, RL and test-time scaling all have room.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 38
NUM_TRAIN = 400
NUM_REVISIONS = 100
NUM_TEST = 50
CORPUS_PARAGRAPHS = 600
MAX_COUNT = 20          # every count stays in 0..MAX_COUNT
REVISE = "\nThat is wrong. Try again."   # after a rejected solution; a revision round appends it and "\n"

NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eva", "Finn", "Gia", "Hal", "Ivy", "Jon", "Kai", "Lea", "Max", "Noa",
         "Omar", "Pia", "Raj", "Sam", "Tia", "Uma"]
THINGS = ["apples", "shells", "coins", "stamps", "books", "cards", "pens", "eggs", "beads", "rocks"]
GAIN = ["{n} buys {b} more.", "{n} finds {b} more.", "{f} gives {n} {b} more.", "{n} wins {b} more."]
LOSS = ["{n} gives {b} to {f}.", "{n} loses {b}.", "{n} sells {b}.", "{f} takes {b} of them."]
QUESTION = "How many {t} now?"
PROSE_GAIN = ["Then {n} bought {b} more, so {n} had {c}.", "Later {n} found {b} more and had {c}.",
              "{f} gave {n} {b} more, which made {c}."]
PROSE_LOSS = ["Then {n} gave {b} to {f} and had {c} left.", "Later {n} lost {b}, leaving {c}.",
              "{n} sold {b}, so {c} were left."]


def _steps(rng: random.Random) -> tuple[int, list[tuple[str, int]]]:
    """A start count and 1-2 (op, amount) events, every running count in 0..MAX_COUNT."""
    count = start = rng.randint(2, 12)
    events = []
    for _ in range(rng.randint(1, 2)):
        op = rng.choice("+-") if 1 <= count <= MAX_COUNT - 1 else ("+" if count < 1 else "-")
        limit = MAX_COUNT - count if op == "+" else count
        amount = rng.randint(1, min(9, limit))
        count += amount if op == "+" else -amount
        events.append((op, amount))
    return start, events


def solution(start: int, events: list[tuple[str, int]], slip: tuple[int, int] | None = None) -> str:
    """The worked solution, one line per step ("a + b = c"), then "#### c". ``slip`` (step, error) writes a
    wrong result at that step and carries it on (a wrong solution for a revision record)."""
    lines, count = [], start
    for i, (op, amount) in enumerate(events):
        result = count + amount if op == "+" else count - amount
        if slip is not None and slip[0] == i:
            result += slip[1]
        lines.append(f"{count} {op} {amount} = {result}")
        count = result
    return "\n".join(lines) + f"\n#### {count}"


def problem(rng: random.Random) -> dict:
    name, friend = rng.sample(NAMES, 2)
    things = rng.choice(THINGS)
    start, events = _steps(rng)
    sentences = [f"{name} has {start} {things}."]
    for op, amount in events:
        sentences.append(rng.choice(GAIN if op == "+" else LOSS).format(n=name, f=friend, b=amount))
    sentences.append(QUESTION.format(t=things, n=name))
    return {"question": " ".join(sentences), "answer": solution(start, events), "start": start,
            "events": [f"{op}{amount}" for op, amount in events]}


def revision(rng: random.Random, record: dict) -> dict:
    """The question, a wrong solution (one step's result off by 1 or 2), REVISE; answered by the right one."""
    events = [(e[0], int(e[1:])) for e in record["events"]]
    slip = (rng.randrange(len(events)), rng.choice([-2, -1, 1, 2]))
    wrong = solution(record["start"], events, slip)
    return {"question": record["question"] + "\n" + wrong + REVISE, "answer": record["answer"],
            "start": record["start"], "events": record["events"]}


def paragraph(rng: random.Random) -> str:
    name, friend = rng.sample(NAMES, 2)
    things = rng.choice(THINGS)
    start, events = _steps(rng)
    sentences, count = [f"{name} had {start} {things}."], start
    for op, amount in events:
        count += amount if op == "+" else -amount
        sentences.append(rng.choice(PROSE_GAIN if op == "+" else PROSE_LOSS).format(n=name, f=friend, b=amount,
                                                                                      c=count))
    sentences.append(f"In the end {name} had {count} {things}.")
    return " ".join(sentences)


def generate() -> dict[str, str]:
    """file name -> text, from SEED."""
    rng = random.Random(SEED)
    seen, train, test = set(), [], []
    while len(train) + len(test) < NUM_TRAIN + NUM_TEST:
        record = problem(rng)
        if record["question"] in seen:
            continue
        seen.add(record["question"])
        (train if len(train) < NUM_TRAIN else test).append(record)
    train += [revision(rng, train[i]) for i in rng.sample(range(NUM_TRAIN), NUM_REVISIONS)]
    lines = lambda records: "".join(json.dumps(r) + "\n" for r in records)  # noqa: E731
    corpus = "\n\n".join(paragraph(rng) for _ in range(CORPUS_PARAGRAPHS)) + "\n"
    return {"train.jsonl": lines(train), "test.jsonl": lines(test), "corpus.txt": corpus}


def main(folder: str | Path = Path(__file__).parent) -> None:
    for name, text in generate().items():
        (Path(folder) / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])
