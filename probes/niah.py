"""Needle in a haystack (Kamradt 2023; thesis Figs 4.9 and 4.11): retrieval accuracy over a grid
of context length × needle depth, with the training length marked.

    report = niah_grid(model, Needle(num_needles=4), lengths=[128, 256, 512, 1024, 2048],
                       depths=[0, 0.25, 0.5, 0.75, 1.0], trials=16, seed=0)
    save_niah_figure(report, "niah.png")

Two haystacks share one protocol (``case(rng, length=, depth=) -> Problem``):
  - ``Needle`` (training/verifiable/needle.py): random filler ids with key → value needles and a
    query ``QUERY k`` at the end; a model trained on ``data.kind: needle`` is probed on its own
    layout. Chance is 1 / num_values.
  - ``TextNeedle``: a local text file as the haystack (cut at a random offset, repeated if
    short), the needle " The secret code of <key> is <value>. " at the depth, then " What is the
    secret code of <key>? The secret code of <key> is"; the answer is " <value>" (a random
    five-letter key, a random four-digit value), tokenized with the model's tokenizer.
A case is right when greedy decoding reproduces every answer token, checked teacher-forced in one
forward: the arg-max at each answer position equals the answer token. Lengths beyond a model's
hard limit (SCA's sca.maxlen) are refused before anything runs; lengths beyond a soft limit
(a transformers config's max_position_embeddings) are run and flagged.
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from assocmem.training.generation import check_context
from assocmem.training.text_files import encode_text
from assocmem.training.verifiable import Problem

from .plotting import save_heatmap


class NeedleSource(Protocol):
    def case(self, rng: np.random.Generator, *, length: int, depth: float | None) -> Problem: ...


class TextNeedle:
    """A haystack of real text from a local file (see the module docstring)."""

    NEEDLE = " The secret code of {key} is {value}. "
    QUERY = " What is the secret code of {key}? The secret code of {key} is"

    def __init__(self, path: str | Path, tokenizer):
        text = Path(path).read_text(encoding="utf-8")
        self.tokenizer, self.filler = tokenizer, encode_text(tokenizer, text)
        if len(self.filler) < 16:
            raise ValueError(f"{path} holds {len(self.filler)} tokens; a haystack needs at least 16")

    def case(self, rng: np.random.Generator, *, length: int, depth: float | None) -> Problem:
        key = "".join(rng.choice(list(string.ascii_lowercase), size=5))
        value = str(int(rng.integers(1000, 10000)))
        needle = encode_text(self.tokenizer, self.NEEDLE.format(key=key, value=value))
        query = encode_text(self.tokenizer, self.QUERY.format(key=key))
        slots = length - len(needle) - len(query)
        if slots < 0:
            raise ValueError(f"length={length} is shorter than the needle and the query ({length - slots} tokens)")
        start = int(rng.integers(len(self.filler)))
        filler = [self.filler[(start + i) % len(self.filler)] for i in range(slots)]
        at = int(round((rng.random() if depth is None else depth) * slots))
        return Problem(prompt=tuple(filler[:at] + needle + filler[at:] + query),
                       reference=tuple(encode_text(self.tokenizer, f" {value}")), info={"answer": value, "needle_at": at})


@torch.no_grad()
def retrieved(model, problems: Sequence[Problem], batch_size: int = 16) -> np.ndarray:
    """[N] bool: greedy decoding would reproduce each problem's reference (teacher-forced arg-max)."""
    out = []
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        lengths = {len(p.prompt) + len(p.reference) for p in chunk}
        if len(lengths) != 1:
            raise ValueError(f"a batch must hold cases of one length, got {sorted(lengths)}")
        seq = torch.tensor([list(p.prompt) + list(p.reference[:-1]) for p in chunk])           # [B, T]
        device = next(model.parameters()).device
        logits = model(input_ids=seq.to(device)).logits                                        # [B, T, V]
        m = len(chunk[0].reference)
        guess = logits[:, -m:].argmax(-1).cpu()                                                # [B, m]
        out.append((guess == torch.tensor([list(p.reference) for p in chunk])).all(-1).numpy())
    return np.concatenate(out)


def niah_grid(model, source: NeedleSource, *, lengths: Sequence[int], depths: Sequence[float], trials: int,
              seed: int = 0, batch_size: int = 16, train_length: int | None = None,
              report: Callable[[str], None] | None = None) -> dict:
    """Accuracy [len(depths), len(lengths)] over ``trials`` cases per cell (fresh haystacks and needles
    per cell, from ``numpy.random.default_rng([seed, i, j])``); ``report`` (e.g.
    training/progress.progress_line) hears "cell c/C: depth d, length n ..." before each cell."""
    if trials < 1 or not lengths or not depths:
        raise ValueError("give at least one length, one depth and trials >= 1")
    flags = {}
    for length in lengths:
        cell_flags = check_context(model, length, f"context {length}")
        if cell_flags:
            flags[str(length)] = cell_flags
    was_training = model.training
    model.eval()
    try:
        accuracy = np.zeros((len(depths), len(lengths)))
        for i, depth in enumerate(depths):
            for j, length in enumerate(lengths):
                if report is not None:
                    report(f"cell {i * len(lengths) + j + 1}/{len(depths) * len(lengths)}: depth {100 * depth:.0f}%, "
                           f"length {length} ...")
                rng = np.random.default_rng([seed, i, j])
                cases = [source.case(rng, length=length, depth=depth) for _ in range(trials)]
                accuracy[i, j] = retrieved(model, cases, batch_size).mean()
    finally:
        model.train(was_training)
    values = getattr(source, "num_values", None)
    return {"lengths": list(lengths), "depths": list(depths), "trials": trials, "seed": seed,
            "accuracy": accuracy.tolist(), "chance": None if values is None else 1.0 / values,
            "train_length": train_length, "flags": flags,
            "mean_within_train_length": _mean_where(accuracy, lengths, lambda n: train_length and n <= train_length),
            "mean_beyond_train_length": _mean_where(accuracy, lengths, lambda n: train_length and n > train_length)}


def _mean_where(accuracy: np.ndarray, lengths: Sequence[int], keep) -> float | None:
    cols = [j for j, n in enumerate(lengths) if keep(n)]
    return float(accuracy[:, cols].mean()) if cols else None


def save_niah_figure(report: dict, path: str | Path, title: str = "") -> Path:
    """Heat map of accuracy: depth (rows) × context length (columns), the training length dashed;
    lengths flagged beyond a soft limit carry a '*'."""
    lengths, train = report["lengths"], report["train_length"]
    columns = [f"{n}{'*' if str(n) in report['flags'] else ''}" for n in lengths]
    marker = (sum(n <= train for n in lengths) - 0.5) if train else None
    rows = [f"{100 * d:.0f}%" for d in report["depths"]]
    chance = f", chance {report['chance']:.3f}" if report["chance"] is not None else ""
    return save_heatmap(path, np.array(report["accuracy"]), rows=rows, columns=columns,
                        title=title or f"needle retrieval ({report['trials']} cases per cell{chance})",
                        xlabel="context length (tokens)", ylabel="needle depth", marker_after=marker,
                        marker_label=f"training length {train}" if train else "")
