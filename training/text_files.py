"""Local text files and tokenizers: what every text data path (packing, prompt/response rows,
GSM8K-style problem files) reads with.

Files are read with ``datasets.load_dataset`` and local ``data_files`` only
(no Hub access): ``.txt``/``.text``/``.md`` with the "text" builder,
``.json``/``.jsonl`` with "json", ``.parquet`` with "parquet". The default
tokenizer is byte-level (UTF-8 bytes 0..255 plus an end-of-document id 256);
any local HF tokenizer folder works too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, Sequence

import datasets

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

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)


def tokenizer_vocab_size(tokenizer) -> int:
    """Number of ids the model's embedding must hold (len() counts added tokens)."""
    return len(tokenizer)


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (the byte tokenizer or an HF tokenizer)."""
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
