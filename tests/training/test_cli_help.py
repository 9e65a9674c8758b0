"""Every subcommand of the one `assocmem` console script answers --help."""
import pytest

from assocmem.training.cli import SUBCOMMANDS, main

COMMANDS = [[c] for c in SUBCOMMANDS] + [["bench", "mixers"], ["bench", "decode"]] + [
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
