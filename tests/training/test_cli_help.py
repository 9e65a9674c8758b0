"""Every subcommand of the one `assocmem` console script answers --help."""
import pytest

from assocmem.cli import SUBCOMMANDS, main

COMMANDS = [[c] for c in SUBCOMMANDS] + [["bench", k] for k in ("mixers", "decode", "train", "breakdown")] + [
    ["probe", p] for p in ("graph-tracing", "recall", "causality", "capacity")]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv + ["--help"])
    assert stop.value.code == 0
    assert "usage: assocmem " + " ".join(argv) in capsys.readouterr().out


def test_unknown_subcommand_lists_the_choices(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["trian"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'trian'" in err and "train" in err


def test_bench_train_runs_and_writes_json(tmp_path):
    """A tiny shape per mixer: one row each with positive tokens/s, JSON written; bad sizes refused."""
    import json

    out = tmp_path / "t.json"
    args = ["bench", "train", "--mixers", "attn", "gdn", "--d-model", "16", "--vocab", "128", "--seq-len", "32",
            "--num-kv-pairs", "4", "--batch", "2", "--warmup", "1", "--steps", "2", "--json", str(out)]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["mixer"] for r in rows] == ["attn", "gdn"]
    assert all(r["tokens_per_s"] > 0 and r["median_step_s"] > 0 for r in rows)
    with pytest.raises(SystemExit) as exit_:  # argparse: cli/types.positive_int
        main(["bench", "train", "--batch", "0"])
    assert exit_.value.code == 2
    assert main(["bench", "train", "--vocab", "256", "--seq-len", "256"]) == 2


@pytest.mark.parametrize("kind", ["mixers", "decode", "train", "breakdown"])
def test_bench_refuses_to_overwrite_results_before_running(kind, tmp_path, capsys, monkeypatch):
    """An existing --json is kept (exit 2, nothing run) unless --overwrite; a folder or a missing
    parent folder is refused with the path at fault named."""
    from assocmem.cli import bench as bench_cli

    ran = []
    monkeypatch.setattr(bench_cli, "_mixers", lambda args: ran.append(args) or 0)
    kept = tmp_path / "bench.json"
    kept.write_text("[1, 2, 3]")
    assert main(["bench", kind, "--json", str(kept)]) == 2
    err = capsys.readouterr().err
    assert f"assocmem bench {kind}: --json {kept} exists; pass --overwrite" in err
    assert kept.read_text() == "[1, 2, 3]" and not ran
    assert main(["bench", kind, "--json", str(tmp_path)]) == 2
    assert f"--json {tmp_path} is a folder" in capsys.readouterr().err
    missing = tmp_path / "nowhere" / "b.json"
    assert main(["bench", kind, "--json", str(missing)]) == 2
    assert f"folder {missing.parent} does not exist" in capsys.readouterr().err


def test_bench_mixers_overwrite_replaces_json_and_markdown(tmp_path, monkeypatch):
    """With --overwrite the bench runs and both files are replaced."""
    import json

    from assocmem.training.bench import forms as bench

    row = {"family": "softmax", "impl": "sdpa", "T": 8, "mode": "fwd", "ms": 1.0, "gflops": None,
           "peak_mb": 0.0, "saved_mb": None}
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: [row])
    js, md = tmp_path / "b.json", tmp_path / "b.md"
    js.write_text("old")
    md.write_text("old")
    assert main(["bench", "mixers", "--json", str(js), "--markdown", str(md)]) == 2
    assert js.read_text() == md.read_text() == "old"
    assert main(["bench", "mixers", "--json", str(js), "--markdown", str(md), "--overwrite"]) == 0
    assert json.loads(js.read_text()) == [row] and "| softmax | 8 | sdpa |" in md.read_text()
