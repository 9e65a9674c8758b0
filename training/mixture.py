"""Data mixtures in stages (``data.kind: mixture``, config.py ``MixtureData``).

Every source (local files or a ``save_to_disk`` folder) is read once, its records tokenized into
documents (each ending with EOS) and, for every block length a stage uses, packed into blocks
(data.py ``pack_documents``); the blocks of all sources at one length form one dataset, source i
holding rows offset_i .. offset_i + n_i − 1.

The batch of step s, in the stage j holding s (weights w, length L):

  1. sources   c_r ~ Categorical(w / Σw), r = 0..B−1, from ``numpy.random.default_rng([seed, 0, s])``
  2. row r is the k-th draw of source c_r since the stage began (k counts the draws of steps
     before s, replayed from their seeds, then those earlier in this batch); it reads block
     ``perm[k mod n]`` of that source, ``perm = default_rng([seed, 1, j, c_r, k // n]).permutation(n)``:
     each source is read in shuffled epochs, without repeats inside an epoch.

Everything is a function of (seed, step), so a resumed run draws what an uninterrupted run draws,
across stage boundaries too, and every process computes the same global batch. With
``eval_fraction`` the last fraction of each source's records is held out (packed at the last
stage's length), so a source's training and evaluation text never overlap.
"""
from __future__ import annotations

import math
from pathlib import Path
import datasets
import numpy as np

from .packing import TokenStream, encode_stream, pack_documents
from .text_files import load_text_files, text_values


def read_source(source) -> list[str]:
    """The texts of a ``MixtureSource``: one per record (a list ``text_field`` joined with newlines)."""
    if source.files:
        raw = load_text_files(source.files, sample_by=source.sample_by)
        where = f"files {source.files}"
    else:
        raw = _load_saved(source.dataset, source.split)
        where = f"dataset {source.dataset}"
    fields = [source.text_field] if isinstance(source.text_field, str) else source.text_field
    missing = [f for f in fields if f not in raw.column_names]
    if missing:
        raise ValueError(f"{where}: text_field {missing} is not a column; columns: {raw.column_names}")
    columns = [text_values(raw, f) for f in fields]
    return ["\n".join(parts) for parts in zip(*columns)]


def _load_saved(folder: str, split: str | None) -> datasets.Dataset:
    """A ``save_to_disk`` folder read into memory (``keep_in_memory``: no cache file is written anywhere)."""
    if not Path(folder).is_dir():
        raise ValueError(f"dataset {folder!r} is not a folder; give a folder written by Dataset.save_to_disk")
    try:
        loaded = datasets.load_from_disk(folder, keep_in_memory=True)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"dataset {folder!r} is not a save_to_disk folder ({err})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(f"dataset {folder!r} holds the splits {sorted(loaded)}; set split to one of them "
                             f"(got {split!r})")
        return loaded[split]
    if split is not None:
        raise ValueError(f"dataset {folder!r} is one Dataset, not a DatasetDict; leave split out (got {split!r})")
    return loaded


class Mixture:
    """The sources of a ``MixtureData`` tokenized once; ``stage_dataset(j)`` packs them at stage j's length."""

    def __init__(self, data, tokenizer):
        self.data, self.names, self.schedule = data, list(data.sources), data.schedule()
        self.train_docs: list[TokenStream] = []
        held_out: list[TokenStream] = []
        for name, source in data.sources.items():
            try:
                texts = read_source(source)
            except ValueError as err:
                raise ValueError(f"data.sources.{name}: {err}") from None
            docs = encode_stream(tokenizer, texts)
            kept = len(docs.lengths) - _held_out(len(docs.lengths), data.eval_fraction, name)
            self.train_docs.append(docs.head(kept))
            held_out.append(docs.tail(kept))
        self.eval_docs = TokenStream.join(held_out)
        self._packed: dict[int, tuple[datasets.Dataset, np.ndarray]] = {}
        for j in range(len(self.schedule)):
            self.stage_dataset(j)  # every stage is packed (and refused) before the first step

    def stage_of(self, step: int) -> int:
        """Index of the stage holding ``step`` (0-based)."""
        return sum(1 for first, _, _ in self.schedule[1:] if first <= step)

    def probabilities(self, stage: int) -> np.ndarray:
        """The sources' draw probabilities in ``stage`` (float64 [num sources], summing to 1)."""
        w = np.array([self.schedule[stage][1][n] for n in self.names], dtype=np.float64)
        return w / w.sum()

    def stage_dataset(self, stage: int) -> datasets.Dataset:
        """The blocks ``stage`` draws from: every source packed at its length (input_ids, labels[, position_ids])."""
        return self._pack(self.schedule[stage][2])[0]

    def offsets(self, stage: int) -> np.ndarray:
        """First row of each source in ``stage_dataset(stage)``, then the total (int64 [num sources + 1])."""
        return self._pack(self.schedule[stage][2])[1]

    def _pack(self, seq_len: int) -> tuple[datasets.Dataset, np.ndarray]:
        """(every source's blocks of ``seq_len`` in one dataset, the sources' first rows), packed once per length."""
        if seq_len not in self._packed:
            parts, sizes = [], []
            for name, docs in zip(self.names, self.train_docs):
                tokens = len(docs.tokens)
                if tokens < seq_len:
                    drawn = [j for j, (_, w, n) in enumerate(self.schedule) if n == seq_len and w[name] > 0]
                    if drawn:
                        raise ValueError(f"data.sources.{name}: {tokens} training tokens, fewer than one block of "
                                         f"seq_len={seq_len}, which stage {drawn[0]} draws it at; give the source "
                                         f"more text or lower that seq_len")
                    sizes.append(0)
                    continue
                part = pack_documents(docs, seq_len, documents=self.data.documents)
                parts.append(part)
                sizes.append(len(part))
            self._packed[seq_len] = (datasets.concatenate_datasets(parts), np.concatenate([[0], np.cumsum(sizes)]))
        return self._packed[seq_len]

    def eval_dataset(self) -> datasets.Dataset | None:
        """The held-out records of every source packed at the last stage's length (None without eval_fraction)."""
        if not len(self.eval_docs.lengths):
            return None
        seq_len = self.schedule[-1][2]
        if len(self.eval_docs.tokens) < seq_len:
            raise ValueError(f"data.eval_fraction={self.data.eval_fraction} holds out {len(self.eval_docs.tokens)} "
                             f"tokens, fewer than one block of the last stage's seq_len={seq_len}; raise eval_fraction "
                             f"or set it to 0")
        return pack_documents(self.eval_docs, seq_len, documents=self.data.documents)

    def __len__(self) -> int:
        """Training blocks at the first stage's length."""
        return int(self.offsets(0)[-1])


def _held_out(num_records: int, fraction: float, name: str) -> int:
    if fraction == 0:
        return 0
    held = max(1, int(round(fraction * num_records)))
    if held >= num_records:
        raise ValueError(f"data.sources.{name}: eval_fraction={fraction} of its {num_records} records leaves none "
                         f"to train on")
    return held


class MixtureSampler:
    """Global batch rows of each step of a ``Mixture`` (module docstring); ``batch(step)`` -> (dataset, rows)."""

    def __init__(self, mixture: Mixture, batch_size: int, *, seed: int):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.mixture, self.batch_size, self.seed = mixture, batch_size, seed
        self._cursor: tuple[int, int, np.ndarray] | None = None  # (stage, next step, draws per source before it)
        self._perms: dict[tuple[int, int, int], np.ndarray] = {}

    def sources(self, step: int) -> np.ndarray:
        """The source of every row of the batch of ``step`` (int64 [batch_size], indices into mixture.names)."""
        p = self.mixture.probabilities(self.mixture.stage_of(step))
        return np.random.default_rng([self.seed, 0, step]).choice(len(p), size=self.batch_size, p=p)

    def counts(self, start: int, stop: int) -> dict[str, int]:
        """Rows drawn from each source over the steps start .. stop − 1."""
        total = np.zeros(len(self.mixture.names), dtype=np.int64)
        for step in range(start, stop):
            total += np.bincount(self.sources(step), minlength=len(total))
        return dict(zip(self.mixture.names, total.tolist()))

    def _drawn_before(self, step: int) -> np.ndarray:
        """Draws of each source in the steps of ``step``'s stage before ``step`` (replayed once, then carried)."""
        stage = self.mixture.stage_of(step)
        if self._cursor is None or self._cursor[0] != stage or self._cursor[1] > step:
            self._cursor = (stage, self.mixture.schedule[stage][0], np.zeros(len(self.mixture.names), np.int64))
        _, at, drawn = self._cursor
        for s in range(at, step):
            drawn = drawn + np.bincount(self.sources(s), minlength=len(drawn))
        self._cursor = (stage, step, drawn)
        return drawn

    def _perm(self, stage: int, source: int, epoch: int, n: int) -> np.ndarray:
        key = (stage, source, epoch)
        if key not in self._perms:
            if len(self._perms) > 4 * len(self.mixture.names):
                self._perms.clear()
            self._perms[key] = np.random.default_rng([self.seed, 1, stage, source, epoch]).permutation(n)
        return self._perms[key]

    def batch(self, step: int) -> tuple[datasets.Dataset, np.ndarray]:
        """(the stage's dataset, its rows for the global batch of ``step``: int64 [batch_size])."""
        stage = self.mixture.stage_of(step)
        offsets = self.mixture.offsets(stage)
        chosen = self.sources(step)
        drawn = self._drawn_before(step)
        rows = np.empty(self.batch_size, dtype=np.int64)
        for i in np.unique(chosen):
            where = np.flatnonzero(chosen == i)
            n = int(offsets[i + 1] - offsets[i])
            ks = drawn[i] + np.arange(len(where))
            rows[where] = [offsets[i] + self._perm(stage, int(i), int(k // n), n)[k % n] for k in ks]
        return self.mixture.stage_dataset(stage), rows

    def epoch_of(self, step: int) -> float:
        """After ``step`` steps: the rows drawn in the last step's stage over that stage's blocks (passes over the
        stage's data)."""
        stage = self.mixture.stage_of(max(step - 1, 0))
        first = self.mixture.schedule[stage][0]
        return (step - first) * self.batch_size / max(int(self.mixture.offsets(stage)[-1]), 1)


def expected_counts(mixture: Mixture, batch_size: int, start: int, stop: int) -> dict[str, float]:
    """The mean rows per source over steps start .. stop − 1 (batch_size · Σ_steps p_i(stage of step))."""
    total = np.zeros(len(mixture.names))
    for step in range(start, stop):
        total += batch_size * mixture.probabilities(mixture.stage_of(step))
    return dict(zip(mixture.names, total.tolist()))

