"""Probe flags are typed and range-checked at parse time, naming the flag (exit 2, nothing run or written);
an unknown capacity spec is a user error naming it, before the output folder is made."""
from __future__ import annotations

import pytest

from assocmem.cli import main


@pytest.mark.parametrize("argv, flag, words", [
    (["probe", "tts", "m", "--bootstrap", "0"], "--bootstrap", "must be an integer >= 1, got '0'"),
    (["probe", "tts", "m", "--bootstrap", "-1"], "--bootstrap", "must be an integer >= 1, got '-1'"),
    (["probe", "tts", "m", "--max-new-tokens", "0"], "--max-new-tokens", "must be an integer >= 1"),
    (["probe", "tts", "m", "--batch-size", "0"], "--batch-size", "must be an integer >= 1"),
    (["probe", "tts", "m", "--top-p", "nan"], "--top-p", "must be a finite number, got 'nan'"),
    (["probe", "tts", "m", "--problem-seed", "-3"], "--problem-seed", "must be an integer >= 0"),
    (["probe", "niah", "m", "--train-length", "-1"], "--train-length", "must be an integer >= 1"),
    (["probe", "niah", "m", "--lengths", "0"], "--lengths", "must be an integer >= 1"),
    (["probe", "sounding", "m", "--batch-size", "0"], "--batch-size", "must be an integer >= 1"),
    (["probe", "causality", "gdn", "--seed", str(2**32)], "--seed", f"must be a seed from 0 to {2**32 - 1}"),
    (["train", "c.yaml", "--seeds", "1", "-2"], "--seeds", "must be an integer >= 0, got '-2'"),
])
def test_bad_probe_numbers_name_the_flag(tmp_path, capsys, argv, flag, words):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path / "out")] if argv[0] == "probe" else argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {words}" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_an_unknown_capacity_spec_is_named_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    for spec, words in [("nosuch", "spec 'nosuch' is not a file and not a mixer preset: unknown mixer preset"),
                        (str(tmp_path / "binary.yaml"), "binary.yaml is not UTF-8 text (byte 0: invalid start byte)")]:
        assert main(["probe", "capacity", spec, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert "assocmem probe capacity: " in err and words in err and "Traceback" not in err
        assert not (tmp_path / "out").exists()
