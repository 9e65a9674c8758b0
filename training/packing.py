"""Documents to fixed-length blocks: token ids per document (each ending with EOS), concatenated and cut
into [num_blocks, seq_len] rows (data.py ``pack_dataset`` for one corpus, mixture.py per source and stage)."""
from __future__ import annotations

from typing import Literal, NamedTuple, Sequence

import datasets
import numpy as np

from .tasks import arrays_to_dataset
from .text_files import encode_text


class TokenStream(NamedTuple):
    """Documents as one int32 token array [num_tokens] and their lengths int64 [num_documents] (4 bytes a token:
    what a corpus costs in memory before packing)."""

    tokens: np.ndarray
    lengths: np.ndarray

    @staticmethod
    def join(parts: Sequence["TokenStream"]) -> "TokenStream":
        return TokenStream(np.concatenate([p.tokens for p in parts] or [np.zeros(0, np.int32)]),
                           np.concatenate([p.lengths for p in parts] or [np.zeros(0, np.int64)]))

    def head(self, num_documents: int) -> "TokenStream":
        """The first ``num_documents`` documents."""
        return TokenStream(self.tokens[: int(self.lengths[:num_documents].sum())], self.lengths[:num_documents])

    def tail(self, num_documents: int) -> "TokenStream":
        """The documents after the first ``num_documents``."""
        return TokenStream(self.tokens[int(self.lengths[:num_documents].sum()):], self.lengths[num_documents:])


def encode_documents(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids followed by the tokenizer's end-of-document id (if it has one)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return [encode_text(tokenizer, text) + ([eos] if eos is not None else []) for text in texts]


def encode_stream(tokenizer, texts: Sequence[str], *, chunk: int = 4096) -> TokenStream:
    """``encode_documents`` as a TokenStream, ``chunk`` texts at a time (no Python list of the whole corpus)."""
    parts = []
    for start in range(0, len(texts), chunk):
        docs = encode_documents(tokenizer, texts[start:start + chunk])
        parts.append(TokenStream(np.fromiter((t for d in docs for t in d), dtype=np.int32),
                                 np.array([len(d) for d in docs], dtype=np.int64)))
    return TokenStream.join(parts)


def pack_documents(docs: Sequence[Sequence[int]] | TokenStream, seq_len: int, *,
                   documents: Literal["separate", "joined"]) -> datasets.Dataset:
    """Documents (token ids, each ending with its EOS; or a TokenStream) concatenated and cut into
    [num_blocks, seq_len] blocks (``pack_dataset``; the tail shorter than a block is dropped)."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    if documents not in ("separate", "joined"):
        raise ValueError(f"documents must be 'separate' or 'joined', got {documents!r}")
    if not isinstance(docs, TokenStream):
        docs = TokenStream(np.fromiter((t for d in docs for t in d), dtype=np.int64),
                           np.array([len(d) for d in docs], dtype=np.int64))
    stream, lengths = docs
    num_blocks = len(stream) // seq_len
    if num_blocks == 0:
        raise ValueError(f"the data has {len(stream)} tokens, fewer than one block of seq_len={seq_len}")
    used = num_blocks * seq_len
    blocks = stream[:used].reshape(num_blocks, seq_len)  # [N, seq_len]
    columns = {"input_ids": blocks, "labels": blocks.astype(np.int64)}
    if documents == "separate":
        starts = np.cumsum(lengths) - lengths  # each document's first token in the stream
        places = np.arange(used, dtype=np.int64) - np.repeat(starts, lengths)[:used]
        columns["position_ids"] = places.reshape(num_blocks, seq_len)  # [N, seq_len]
        columns["labels"][columns["position_ids"] == 0] = -100
    return arrays_to_dataset(columns)
