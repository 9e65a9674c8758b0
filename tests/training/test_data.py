"""Local files through HF datasets: byte tokenizer, local HF tokenizer, packing, train/eval split."""
import json

import numpy as np
import pandas as pd
import pytest

from assocmem.training.config import config_from_dict
from assocmem.training.data import ByteTokenizer, build_datasets, load_text_files, load_tokenizer, pack_dataset
from training_helpers import BASE

DOCS = ["héllo world", "assoc mem", "x" * 40]


def _stream(tokenizer, docs):
    return [t for d in docs for t in tokenizer.encode(d) + [tokenizer.eos_token_id]]


def test_byte_tokenizer_round_trips_utf8():
    tok = ByteTokenizer()
    ids = tok.encode("héllo ∑")
    assert max(ids) < 256 and len(ids) == len("héllo ∑".encode())
    assert tok.decode(ids + [256]) == "héllo ∑" and len(tok) == 257


@pytest.mark.parametrize("suffix", ["jsonl", "parquet", "txt"])
def test_packing_concatenates_documents_with_eos(tmp_path, suffix):
    paths = []
    for i, doc in enumerate(DOCS):
        path = tmp_path / f"doc{i}.{suffix}"
        if suffix == "jsonl":
            path.write_text(json.dumps({"text": doc}) + "\n")
        elif suffix == "parquet":
            pd.DataFrame({"text": [doc]}).to_parquet(path)
        else:
            path.write_text(doc)
        paths.append(path)
    packed = pack_dataset(load_text_files(paths), ByteTokenizer(), 8, documents="joined")
    stream = _stream(ByteTokenizer(), DOCS)
    expected = np.array(stream[: len(stream) // 8 * 8]).reshape(-1, 8)
    np.testing.assert_array_equal(np.array(packed["input_ids"]), expected)
    assert packed["labels"] == packed["input_ids"]


def test_a_local_hf_tokenizer_folder(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.train_from_iterator(DOCS * 3, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="[EOS]").save_pretrained(tmp_path / "tok")
    tok = load_tokenizer(str(tmp_path / "tok"))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"body": d}) + "\n" for d in DOCS))
    packed = pack_dataset(load_text_files([tmp_path / "a.jsonl"]), tok, 2, text_field="body", documents="joined")
    words = [tok.convert_tokens_to_ids(w) for w in ["héllo", "world", "[EOS]", "assoc", "mem", "[EOS]"]]
    assert packed["input_ids"][:3] == [words[0:2], words[2:4], words[4:6]]


def test_files_config_with_held_out_fraction(tmp_path):
    (tmp_path / "c.txt").write_text("abcdefgh" * 20)  # 160 bytes + EOS = 161 tokens -> 10 blocks of 16
    data = {"kind": "files", "train_files": [str(tmp_path / "c.txt")], "seq_len": 16, "eval_fraction": 0.2}
    cfg = config_from_dict({**BASE, "data": data})
    train, held_out, vocab = build_datasets(cfg.data)
    assert (len(train), len(held_out), vocab) == (8, 2, 257)
    assert held_out["input_ids"][0] == list(b"abcdefghabcdefgh")


def test_bad_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_text_files([tmp_path / "missing.txt"])
    (tmp_path / "a.csv").write_text("x")
    with pytest.raises(ValueError, match="unsupported file suffix"):
        load_text_files([tmp_path / "a.csv"])
    with pytest.raises(ValueError, match="'nobody/no-tokenizer' is not a local folder, so it was read as a"):
        load_tokenizer("nobody/no-tokenizer")  # offline in the tests (tests/conftest.py) and not cached
    with pytest.raises(ValueError, match="a local HF tokenizer folder or a Hugging Face Hub id"):
        load_tokenizer(str(tmp_path / "no" / "such"))
