"""The data a TrainConfig names (``build_datasets``), and local text corpora packed into blocks.

Files and tokenizers are read by text_files.py (local files only; the byte tokenizer, a local HF
tokenizer folder or a Hub id). Documents are tokenized, each followed by the end-of-document id,
concatenated and cut into blocks of ``seq_len`` tokens (the tail shorter than a block is dropped).
Labels equal the inputs (HF-aligned; the model shifts them). With ``data.documents: separate`` (the
default) the blocks also carry ``position_ids`` and each document is read on its own
(``pack_dataset``). With a prompt and a response field, each record is one row instead, with the
loss on the response (``pair_dataset``).
"""
from __future__ import annotations

import warnings
from typing import Literal, Sequence

import datasets

from .packing import encode_documents, pack_documents
from .prompt_response import prompt_response_arrays
from .tasks import arrays_to_dataset
from .text_files import (ByteTokenizer, Tokenizer, encode_text, hf_tokenizer, load_text_files, load_tokenizer,
                         save_tokenizer, text_values, tokenizer_vocab_size)

__all__ = ["ByteTokenizer", "Tokenizer", "encode_text", "hf_tokenizer", "load_text_files", "load_tokenizer",
           "save_tokenizer", "tokenizer_vocab_size", "pack_dataset", "pack_documents", "encode_documents",
           "pair_dataset", "data_vocab_size", "data_tokenizer", "data_eos_id", "build_datasets"]


def pack_dataset(raw: datasets.Dataset, tokenizer, seq_len: int, *, text_field: str = "text",
                 documents: Literal["separate", "joined"]) -> datasets.Dataset:
    """Tokenize every record's ``text_field``, end each with EOS, concatenate, cut into
    [num_blocks, seq_len] blocks. Returns a Dataset with input_ids and labels (= input_ids).

    documents="separate" adds ``position_ids`` [num_blocks, seq_len], each token's place in its
    document (0 at a document's first token; a document cut by a block boundary continues its count),
    so that the model reads every document on its own (``CausalLMObjective`` passes them to the
    model: document boundaries for assocmem models, transformers' packed-sequence masks for others),
    and sets the label of each document's first token to -100: it is not predicted from the document
    before.
    """
    if text_field not in raw.column_names:
        raise ValueError(f"text_field {text_field!r} is not a column of the data; columns: {raw.column_names}")
    return pack_documents(encode_documents(tokenizer, text_values(raw, text_field)), seq_len, documents=documents)


def pair_dataset(raw: datasets.Dataset, tokenizer, seq_len: int, *, prompt_field: str, response_field: str,
                 overlong: Literal["error", "drop"] = "error") -> datasets.Dataset:
    """One row per record: prompt + response + EOS, right-padded to ``seq_len``, labels -100 on the
    prompt and the padding (prompt_response.py). Records longer than ``seq_len`` are refused
    (``overlong="error"``, the message counts them) or left out with a warning (``"drop"``)."""
    missing = [f for f in (prompt_field, response_field) if f not in raw.column_names]
    if missing:
        raise ValueError(f"prompt/response field {missing} is not a column of the data; columns: {raw.column_names}")
    eos = getattr(tokenizer, "eos_token_id", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else (eos if eos is not None else 0)
    prompts = [encode_text(tokenizer, text) for text in text_values(raw, prompt_field)]
    responses = [encode_text(tokenizer, text) + ([eos] if eos is not None else [])
                 for text in text_values(raw, response_field)]
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    keep = [i for i, n in enumerate(lengths) if n <= seq_len]
    if len(keep) < len(lengths):
        message = (f"{len(lengths) - len(keep)} of {len(lengths)} prompt/response records are longer than "
                   f"seq_len={seq_len} (longest {max(lengths)} tokens)")
        if overlong == "error":
            raise ValueError(f"{message}; raise data.seq_len or set data.overlong: drop")
        if not keep:
            raise ValueError(f"{message}: none is left")
        warnings.warn(f"{message}; dropped (data.overlong: drop)", stacklevel=2)
    inputs, labels = prompt_response_arrays([prompts[i] for i in keep], [responses[i] for i in keep],
                                            width=seq_len, pad_id=pad)
    return arrays_to_dataset({"input_ids": inputs, "labels": labels})


def _files_dataset(data, files: Sequence[str], tokenizer) -> datasets.Dataset:
    raw = load_text_files(files, sample_by=data.sample_by)
    try:
        if data.prompt_field is not None:
            return pair_dataset(raw, tokenizer, data.seq_len, prompt_field=data.prompt_field,
                                response_field=data.response_field, overlong=data.overlong)
        return pack_dataset(raw, tokenizer, data.seq_len, text_field=data.text_field, documents=data.documents)
    except ValueError as err:  # a field or record of the files' records: name the files
        raise ValueError(f"data files {list(files)}: {err}") from None


def data_vocab_size(data) -> int:
    """Vocabulary size of a ``TrainConfig.data`` section without building the data."""
    from .config import FilesData, MixtureData

    text = isinstance(data, (FilesData, MixtureData))
    return tokenizer_vocab_size(load_tokenizer(data.tokenizer)) if text else data.vocab_size


def data_tokenizer(data):
    """The text tokenizer of a ``TrainConfig.data`` section (file data), or None (synthetic tasks,
    whose ids are symbols of the task, not text)."""
    from .config import FilesData, MixtureData

    return load_tokenizer(data.tokenizer) if isinstance(data, (FilesData, MixtureData)) else None


def data_eos_id(data, tokenizer=None) -> int | None:
    """The id that ends a document or a response in this data (the tokenizer's EOS for file data,
    the task's for verifiable tasks), or None when the data has none."""
    from .verifiable import ProblemsFile, VerifiableTask

    if tokenizer is not None:
        return getattr(tokenizer, "eos_token_id", None)
    return data.eos_id if isinstance(data, (VerifiableTask, ProblemsFile)) else None


def build_datasets(data) -> tuple[datasets.Dataset, datasets.Dataset | None, int]:
    """(train, eval or None, vocabulary size) for a ``TrainConfig.data`` section (for a mixture, train is a
    ``mixture.Mixture``: one dataset per stage's block length)."""
    from .config import FilesData, GraphWalkData, MixtureData, MQARData, SelectiveCopyData
    from .mixture import Mixture
    from .tasks import graph_walk_dataset, mqar_dataset, selective_copy_dataset
    from .verifiable import ProblemsFile, VerifiableTask, problem_sets, problems_dataset

    if isinstance(data, FilesData):
        tokenizer = load_tokenizer(data.tokenizer)
        packed = _files_dataset(data, data.train_files, tokenizer)
        if data.eval_files:
            held_out = _files_dataset(data, data.eval_files, tokenizer)
        elif data.eval_fraction > 0:
            n_eval = max(1, int(round(data.eval_fraction * len(packed))))
            if n_eval >= len(packed):
                raise ValueError(f"eval_fraction={data.eval_fraction} leaves no training block of {len(packed)}")
            held_out, packed = packed.select(range(len(packed) - n_eval, len(packed))), packed.select(
                range(len(packed) - n_eval))
        else:
            held_out = None
        return packed, held_out, tokenizer_vocab_size(tokenizer)
    if isinstance(data, MixtureData):
        tokenizer = load_tokenizer(data.tokenizer)
        mixture = Mixture(data, tokenizer)
        return mixture, mixture.eval_dataset(), tokenizer_vocab_size(tokenizer)
    if isinstance(data, (VerifiableTask, ProblemsFile)):
        train_problems, eval_problems = problem_sets(data)
        return (problems_dataset(data, train_problems),
                problems_dataset(data, eval_problems) if eval_problems else None, data.vocab_size)

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

    try:
        train = make(data.num_train, data.seed)
        held_out = make(data.num_eval, data.eval_seed) if data.num_eval > 0 else None
    except MemoryError as err:  # numpy's _ArrayMemoryError included
        raise ValueError(f"data: {data.num_train} + {data.num_eval} rows of seq_len={data.seq_len} do not fit in memory "
                         f"({err}); lower data.num_train, data.num_eval or data.seq_len") from None
    return train, held_out, data.vocab_size
