"""Data files: empty, malformed, binary, non-UTF-8 files and non-string text fields each give one clear error
naming the file and the line or record (``assocmem train`` exits 2, no run folder); the datasets cache is a
temporary folder, never the user's home cache."""
from __future__ import annotations

import pytest
import yaml

from assocmem.cli import main
from assocmem.training.text_files import load_text_files

CASES = [
    ("empty.jsonl", b"", "empty.jsonl is empty; a data file needs at least one record"),
    ("empty.txt", b"", "empty.txt is empty"),
    ("binary.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary.txt, line 1: not UTF-8 text (byte 1 of the line"),
    ("nul.txt", b"text\x00more\n", "nul.txt, line 1: holds a NUL byte: a binary file"),
    ("latin1.txt", "line one\ncafé\n".encode("latin-1"), "latin1.txt, line 2: not UTF-8 text (byte 4 of the line: "
                                                           "invalid continuation byte)"),
    ("torn.jsonl", b'{"text": "a"}\n{"text": \n', "torn.jsonl, line 2, column 10: not a JSON record (Expecting value)"),
    ("list.jsonl", b'{"text": "a"}\n[1, 2]\n', "list.jsonl, line 2: a record must be a JSON object {...}, got list"),
    ("one.json", b'{"text": ', "one.json, line 1, column 10: not valid JSON (Expecting value)"),
    ("numbers.json", b"[1, 2]", "numbers.json: record 0 is int, not a JSON object"),
    ("number.jsonl", b'{"text": "ok"}\n{"text": 5}\n', "data record 1 (0-based, the files in order): field 'text' is "
                                                       "int 5, not text"),
    ("null.jsonl", b'{"text": null}\n{"text": "ok"}\n', "field 'text' is NoneType None, not text"),
]


@pytest.mark.parametrize("name, content, message", CASES, ids=[c[0] for c in CASES])
def test_a_bad_data_file_is_named_with_its_line(tmp_path, capsys, name, content, message):
    (tmp_path / name).write_bytes(content)
    path = tmp_path / "files.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "runs"), "train": {"steps": 1, "batch_size": 1, "progress": False},
        "data": {"kind": "files", "train_files": [str(tmp_path / name)], "seq_len": 8},
        "model": {"hybrid": {"d_model": 16, "layers": "gdn", "mlp_ratio": 0}}}))
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not (tmp_path / "runs" / "files").exists()


def test_the_datasets_cache_stays_out_of_the_home_cache(tmp_path, monkeypatch):
    import datasets

    home_cache = tmp_path / "home-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home_cache)
    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n{"text": "world"}\n')
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    assert load_text_files([tmp_path / "a.jsonl"])["text"] == ["hello", "world"]
    assert load_text_files([tmp_path / "b.txt"], sample_by="line")["text"] == ["one", "two"]
    assert not home_cache.exists()


def test_a_synthetic_data_set_too_large_for_memory_names_its_sizes(write_config, capsys):
    path = write_config("huge", {"data": {"num_train": 10**13}})
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "data: 10000000000000 + 32 rows of seq_len=32 do not fit in memory" in err and "Traceback" not in err
