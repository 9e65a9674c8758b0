"""Every subcommand of the one `assocmem` console script answers --help."""
import pytest

from assocmem.training.cli import SUBCOMMANDS, main

COMMANDS = [[c] for c in SUBCOMMANDS] + [["bench", "mixers"], ["bench", "decode"], ["bench", "train"]] + [
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
    assert main(["bench", "train", "--batch", "0"]) == 2
    assert main(["bench", "train", "--vocab", "256", "--seq-len", "256"]) == 2
