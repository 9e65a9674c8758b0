"""Local text corpora through HF ``datasets``: load, tokenize, pack into fixed-length blocks.

Files are read with ``datasets.load_dataset`` and local ``data_files`` only
(no Hub access): ``.txt``/``.text``/``.md`` with the "text" builder,
``.json``/``.jsonl`` with "json", ``.parquet`` with "parquet". The default
tokenizer is byte-level (UTF-8 bytes 0..255 plus an end-of-document id 256);
any local HF tokenizer folder works too. Documents are tokenized, each followed
by the end-of-document id, concatenated and cut into blocks of ``seq_len``
tokens (the tail shorter than a block is dropped). Labels equal the inputs
(HF-aligned; the model shifts them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, Sequence

import datasets
import numpy as np

from .tasks import arrays_to_dataset

_BUILDERS = {".txt": "text", ".text": "text", ".md": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


class Tokenizer(Protocol):
    """What packing needs from a tokenizer."""

    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255; id 256 ends a document. vocab_size = 257."""

    vocab_size = 257
    eos_token_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return self.vocab_size


def load_tokenizer(name_or_path: str):
    """``"bytes"`` -> ByteTokenizer; otherwise a local HF tokenizer folder (never downloaded)."""
    if name_or_path == "bytes":
        return ByteTokenizer()
    path = Path(name_or_path)
    if not path.is_dir():
        raise ValueError(f"tokenizer must be 'bytes' or a local HF tokenizer folder, got {name_or_path!r} "
                         f"(not a directory)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def tokenizer_vocab_size(tokenizer) -> int:
    """Number of ids the model's embedding must hold (len() counts added tokens)."""
    return len(tokenizer)


def _encode(tokenizer, text: str) -> list[int]:
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.encode(text)
    return tokenizer.encode(text, add_special_tokens=False)


def load_text_files(
    files: Sequence[str | Path],
    *,
    sample_by: Literal["document", "paragraph", "line"] = "document",
) -> datasets.Dataset:
    """Local files -> a Dataset of raw records (one builder for all files, chosen by suffix)."""
    if not files:
        raise ValueError("files is empty; give at least one local .txt/.jsonl/.json/.parquet file")
    paths = [Path(f) for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"data files not found: {missing}")
    builders = {_BUILDERS.get(p.suffix.lower()) for p in paths}
    if None in builders:
        bad = [str(p) for p in paths if p.suffix.lower() not in _BUILDERS]
        raise ValueError(f"unsupported file suffix in {bad}; allowed: {sorted(_BUILDERS)}")
    if len(builders) > 1:
        raise ValueError(f"all data files must share one format, got builders {sorted(builders)}")
    builder = builders.pop()
    kwargs = {"sample_by": sample_by} if builder == "text" else {}
    return datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train", **kwargs)


def pack_dataset(raw: datasets.Dataset, tokenizer, seq_len: int, *, text_field: str = "text") -> datasets.Dataset:
    """Tokenize every record's ``text_field``, end each with EOS, concatenate, cut into
    [num_blocks, seq_len] blocks. Returns a Dataset with input_ids and labels (= input_ids)."""
    if text_field not in raw.column_names:
        raise ValueError(f"text_field {text_field!r} is not a column of the data; columns: {raw.column_names}")
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = [tok for text in raw[text_field] for tok in _encode(tokenizer, text) + ([eos] if eos is not None else [])]
    stream = np.asarray(ids, dtype=np.int64)
    num_blocks = len(stream) // seq_len
    if num_blocks == 0:
        raise ValueError(f"the data has {len(stream)} tokens, fewer than one block of seq_len={seq_len}")
    blocks = stream[: num_blocks * seq_len].reshape(num_blocks, seq_len)  # [N, seq_len]
    return arrays_to_dataset({"input_ids": blocks, "labels": blocks.copy()})


def data_vocab_size(data) -> int:
    """Vocabulary size of a ``TrainConfig.data`` section without building the data."""
    from .config import FilesData

    return tokenizer_vocab_size(load_tokenizer(data.tokenizer)) if isinstance(data, FilesData) else data.vocab_size


def build_datasets(data) -> tuple[datasets.Dataset, datasets.Dataset | None, int]:
    """(train, eval or None, vocabulary size) for a ``TrainConfig.data`` section."""
    from .config import FilesData, GraphWalkData, MQARData, SelectiveCopyData
    from .tasks import graph_walk_dataset, mqar_dataset, selective_copy_dataset

    if isinstance(data, FilesData):
        tokenizer = load_tokenizer(data.tokenizer)
        packed = pack_dataset(load_text_files(data.train_files, sample_by=data.sample_by), tokenizer,
                              data.seq_len, text_field=data.text_field)
        if data.eval_files:
            held_out = pack_dataset(load_text_files(data.eval_files, sample_by=data.sample_by), tokenizer,
                                    data.seq_len, text_field=data.text_field)
        elif data.eval_fraction > 0:
            n_eval = max(1, int(round(data.eval_fraction * len(packed))))
            if n_eval >= len(packed):
                raise ValueError(f"eval_fraction={data.eval_fraction} leaves no training block of {len(packed)}")
            held_out, packed = packed.select(range(len(packed) - n_eval, len(packed))), packed.select(
                range(len(packed) - n_eval))
        else:
            held_out = None
        return packed, held_out, tokenizer_vocab_size(tokenizer)

    def make(n: int, seed: int) -> datasets.Dataset:
        if isinstance(data, MQARData):
            return mqar_dataset(n, data.seq_len, data.num_kv_pairs, vocab_size=data.vocab_size,
                                power_a=data.power_a, random_non_queries=data.random_non_queries, seed=seed)
        if isinstance(data, GraphWalkData):
            return graph_walk_dataset(n, data.seq_len, vocab_size=data.vocab_size, kinds=data.kinds,
                                      sizes=dict(data.sizes), seed=seed)
        if isinstance(data, SelectiveCopyData):
            return selective_copy_dataset(n, data.seq_len, data.num_tokens, vocab_size=data.vocab_size, seed=seed)
        raise TypeError(f"unknown data config {type(data).__name__}")

    train = make(data.num_train, data.seed)
    held_out = make(data.num_eval, data.eval_seed) if data.num_eval > 0 else None
    return train, held_out, data.vocab_size
