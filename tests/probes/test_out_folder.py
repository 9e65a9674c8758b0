"""probes/io.prepare_out: --overwrite deletes only an output folder assocmem wrote (it holds the marker),
never the working directory or a folder above it, never a folder a user made."""
from __future__ import annotations

import os

import pytest

from assocmem.cli import main
from assocmem.probes.io import OUT_MARKER, prepare_out


def test_overwrite_replaces_only_a_marked_folder(tmp_path):
    out = prepare_out(tmp_path / "out", overwrite=False)
    assert (out / OUT_MARKER).is_file()
    (out / "old.json").write_text("{}")
    with pytest.raises(FileExistsError, match="exists and is not empty; pass --overwrite"):
        prepare_out(out, overwrite=False)
    assert prepare_out(out, overwrite=True) == out and sorted(p.name for p in out.iterdir()) == [OUT_MARKER]
    (out / OUT_MARKER).unlink()
    assert prepare_out(out, overwrite=False) == out  # an empty folder: taken, and marked


def test_overwrite_refuses_a_folder_it_did_not_write(tmp_path):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("precious")
    with pytest.raises(FileExistsError, match=f"holds no {OUT_MARKER} marker, so assocmem did not write it"):
        prepare_out(mine, overwrite=True)
    assert (mine / "chapter1.tex").read_text() == "precious"
    link = tmp_path / "link"
    link.symlink_to(prepare_out(tmp_path / "marked", overwrite=False))
    (link / "x").write_text("")
    with pytest.raises(FileExistsError, match="is a symbolic link"):
        prepare_out(link, overwrite=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError, match="is a file, not a folder"):
        prepare_out(tmp_path / "file", overwrite=True)


@pytest.mark.parametrize("out", [".", "..", "sub/.."])
def test_overwrite_never_deletes_the_working_directory_or_above(tmp_path, out, monkeypatch, capsys):
    """Even a marked working directory (the marker alone does not make `--out .` deletable)."""
    here = tmp_path / "work"
    (here / "sub").mkdir(parents=True)
    (here / OUT_MARKER).write_text("")
    (tmp_path / OUT_MARKER).write_text("")
    (here / "notes.txt").write_text("keep")
    monkeypatch.chdir(here)
    assert main(["probe", "causality", "gdn", "--seq-len", "6", "--out", out, "--overwrite"]) == 2
    assert "is the working directory or a folder above it" in capsys.readouterr().err
    assert (here / "notes.txt").read_text() == "keep" and (here / "sub").is_dir()
    assert os.getcwd() == str(here)
