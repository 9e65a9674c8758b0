"""Local text files and tokenizers: what every text data path (packing, prompt/response rows,
GSM8K-style problem files) reads with.

Files are read with ``datasets.load_dataset`` and local ``data_files`` only
(no Hub access): ``.txt``/``.text``/``.md`` with the "text" builder,
``.json``/``.jsonl`` with "json", ``.parquet`` with "parquet"; ``corpus:NAME`` names a file of the small
corpus the package ships (training/corpus/). Its cache lives in a temporary folder
removed after the read (the records are kept in memory), never in the user's home. Before that each
file is checked (``check_data_file``): an empty, binary or non-UTF-8 file, or a malformed JSON record,
is a ValueError naming the file and the line; ``text_values`` refuses a record whose text field is not
a string, naming the record. The default
tokenizer is byte-level (UTF-8 bytes 0..255 plus an end-of-document id 256);
any local HF tokenizer folder works too. ``hf_tokenizer`` gives the transformers form of either
(the byte tokenizer as a ``PreTrainedTokenizerFast`` with the same ids), which a run saves beside
its model (``save_tokenizer``) so that ``pipeline("text-generation", model=RUN/final)`` works.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Literal, Protocol, Sequence

import datasets

from .hub import hub_folder, is_hub_id

CORPUS = Path(__file__).resolve().parent / "corpus"  # the small text corpus the package ships (corpus/README.md)
CORPUS_PREFIX = "corpus:"


def data_path(name: str | Path) -> Path:
    """A data file path; ``corpus:NAME`` is the file NAME of the shipped corpus (training/corpus/NAME)."""
    text = str(name)
    if not text.startswith(CORPUS_PREFIX):
        return Path(name)
    path = CORPUS / text[len(CORPUS_PREFIX):]
    if not path.is_file():
        shipped = sorted(p.name for p in CORPUS.iterdir() if p.suffix in (".txt", ".jsonl"))
        raise ValueError(f"{text}: the shipped corpus has no such file; it has {shipped}")
    return path


_BUILDERS = {".txt": "text", ".text": "text", ".md": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


class Tokenizer(Protocol):
    """What packing needs from a tokenizer."""

    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255; id 256 (``eos_token``) ends a document. vocab_size = 257."""

    vocab_size = 257
    eos_token_id = 256
    eos_token = "<|endoftext|>"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return self.vocab_size


def _byte_alphabet() -> dict[int, str]:
    """Byte -> the printable character that stands for it in a byte-level BPE vocabulary.

    The convention of GPT-2's byte-level BPE (the ``tokenizers`` ByteLevel pre-tokenizer and
    decoder): the printable Latin-1 bytes stand for themselves, the other 68 bytes (controls,
    space, soft hyphen, ...) for chr(256), chr(257), ... in byte order.
    """
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    shifted = iter(range(256, 512))
    return {b: chr(b) if b in printable else chr(next(shifted)) for b in range(256)}


def byte_tokenizer_fast():
    """The ByteTokenizer as a transformers ``PreTrainedTokenizerFast``: the same ids for every text
    (byte b -> id b, a BPE without merges over the byte-level alphabet), EOS ``<|endoftext|>`` = 256.
    ``split_special_tokens``: the text "<|endoftext|>" is 13 bytes, as for ByteTokenizer."""
    from tokenizers import Tokenizer as CoreTokenizer
    from tokenizers import decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: b for b, char in _byte_alphabet().items()}
    core = CoreTokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=ByteTokenizer.eos_token,
                                   split_special_tokens=True)
    if fast.eos_token_id != ByteTokenizer.eos_token_id:
        raise RuntimeError(f"the byte tokenizer's EOS got id {fast.eos_token_id}, expected "
                           f"{ByteTokenizer.eos_token_id}")
    return fast


def hf_tokenizer(tokenizer):
    """The transformers tokenizer of ``tokenizer`` (ByteTokenizer -> ``byte_tokenizer_fast()``; an HF
    tokenizer is returned as it is)."""
    return byte_tokenizer_fast() if isinstance(tokenizer, ByteTokenizer) else tokenizer


def save_tokenizer(tokenizer, folder: str | Path) -> None:
    """``save_pretrained`` of the transformers form of ``tokenizer`` into ``folder`` (a model folder)."""
    hf_tokenizer(tokenizer).save_pretrained(str(folder))


def load_tokenizer(name_or_path: str):
    """``"bytes"`` -> ByteTokenizer; otherwise a local HF tokenizer folder or a Hugging Face Hub id
    (hub.py: its snapshot, fetched once; a local folder of that name wins)."""
    if name_or_path == "bytes":
        return ByteTokenizer()
    path = Path(name_or_path)
    if not path.exists() and is_hub_id(name_or_path):
        path = hub_folder(name_or_path)
    if not path.is_dir():
        raise ValueError(f"tokenizer must be 'bytes', a local HF tokenizer folder or a Hugging Face Hub id, got "
                         f"{name_or_path!r} (not a directory)")
    from assocmem.models.hf_load import load_hf_tokenizer

    return load_hf_tokenizer(path, local_files_only=True)


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
    paths = [data_path(f) for f in files]
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
    for path in paths:
        check_data_file(path, builder)
    kwargs = {"sample_by": sample_by} if builder == "text" else {}
    with tempfile.TemporaryDirectory(prefix="assocmem-datasets-") as cache:  # nothing written to ~/.cache
        try:
            return datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train", cache_dir=cache,
                                         keep_in_memory=True, **kwargs)
        except (datasets.exceptions.DatasetGenerationError, OSError, ValueError) as err:
            cause = err.__cause__ or err
            raise ValueError(f"data files {[str(p) for p in paths]} cannot be read as {builder} "
                             f"({type(cause).__name__}: {cause})") from None


def check_data_file(path: Path, builder: str) -> None:
    """Refuse a data file ``load_dataset`` would fail on deep inside: empty; for text and JSON, not UTF-8 text
    (a binary file) or a JSON record that does not parse or is not an object. The error names the file and line."""
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty; a data file needs at least one record")
    if builder == "parquet":
        _check_parquet(path)
        return
    lines = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if b"\x00" in raw:
                raise ValueError(f"{path}, line {n}: holds a NUL byte: a binary file, not UTF-8 text")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}, line {n}: not UTF-8 text (byte {err.start + 1} of the line: {err.reason}); "
                                 f"data files are UTF-8 text") from None
            if builder == "json":
                lines.append(line)
    if builder == "json":
        _check_json_records(path, lines)


def _check_parquet(path: Path) -> None:
    """A parquet file whose footer reads and that holds at least one row."""
    import pyarrow.parquet as pq

    try:
        rows = pq.read_metadata(path).num_rows
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path} is not a parquet file ({err})") from None
    if rows == 0:
        raise ValueError(f"{path} holds no record (a parquet file with 0 rows)")


def _check_json_records(path: Path, lines: list[str]) -> None:
    """A JSON document of records (a list of objects, or one object) or JSON Lines (one object per line)."""
    try:
        whole = json.loads("".join(lines))
    except json.JSONDecodeError as err:
        if sum(1 for line in lines if line.strip()) < 2:  # one line that is not JSON: not JSON Lines either
            raise ValueError(f"{path}, line {err.lineno}, column {err.colno}: not valid JSON ({err.msg})") from None
    else:
        records = whole if isinstance(whole, list) else [whole]
        bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
        if bad is not None:
            raise ValueError(f"{path}: record {bad} is {type(records[bad]).__name__}, not a JSON object {{...}}")
        if not records:
            raise ValueError(f"{path} holds no record (an empty JSON list)")
        return
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {n}, column {err.pos + 1}: not a JSON record ({err.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {n}: a record must be a JSON object {{...}}, got {type(record).__name__}")


def text_values(raw: datasets.Dataset, field: str) -> list[str]:
    """The ``field`` column of the records, each checked to be text (a number or null names its record)."""
    values = raw[field]
    bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
    if bad is not None:
        raise ValueError(f"data record {bad} (0-based, the files in order): field {field!r} is "
                         f"{type(values[bad]).__name__} {values[bad]!r:.60}, not text; every record's {field} must be "
                         f"a string")
    return values
