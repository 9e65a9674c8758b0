"""Documents to fixed-length blocks: token ids per document (each ending with EOS), concatenated and cut
into [num_blocks, seq_len] rows (data.py ``pack_dataset`` for one corpus, mixture.py per source and stage)."""
from __future__ import annotations

from typing import Literal, Sequence

import datasets
import numpy as np

from .tasks import arrays_to_dataset
from .text_files import encode_text


def encode_documents(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids followed by the tokenizer's end-of-document id (if it has one)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return [encode_text(tokenizer, text) + ([eos] if eos is not None else []) for text in texts]


def pack_documents(docs: Sequence[Sequence[int]], seq_len: int, *,
                   documents: Literal["separate", "joined"]) -> datasets.Dataset:
    """Documents (token ids, each ending with its EOS) concatenated and cut into [num_blocks, seq_len] blocks
    (``pack_dataset``; the tail shorter than a block is dropped)."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    if documents not in ("separate", "joined"):
        raise ValueError(f"documents must be 'separate' or 'joined', got {documents!r}")
    stream = np.asarray([tok for doc in docs for tok in doc], dtype=np.int64)
    num_blocks = len(stream) // seq_len
    if num_blocks == 0:
        raise ValueError(f"the data has {len(stream)} tokens, fewer than one block of seq_len={seq_len}")
    blocks = stream[: num_blocks * seq_len].reshape(num_blocks, seq_len)  # [N, seq_len]
    columns = {"input_ids": blocks, "labels": blocks.copy()}
    if documents == "separate":
        places = np.concatenate([np.arange(len(doc), dtype=np.int64) for doc in docs if doc])
        columns["position_ids"] = places[: num_blocks * seq_len].reshape(num_blocks, seq_len)  # [N, seq_len]
        columns["labels"][columns["position_ids"] == 0] = -100
    return arrays_to_dataset(columns)
