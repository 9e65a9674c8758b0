"""probes/io.run_command: the one way a probe command reports its output or a user's error."""
from __future__ import annotations

import argparse

import pytest

from assocmem.probes.io import USER_ERRORS, run_command
from assocmem.training.config import ConfigError

ARGS = argparse.Namespace(probe="sounding")


def test_prints_the_output_folder_and_exits_0(capsys):
    assert run_command(lambda args: f"runs/{args.probe}", ARGS) == 0
    assert capsys.readouterr().out == "runs/sounding\n"


@pytest.mark.parametrize("error", [FileExistsError("--out x exists"), FileNotFoundError("no such file: y"),
                                   ValueError("bad --threshold"), ConfigError("model.width: not a field")])
def test_a_user_error_is_one_line_on_stderr_and_exit_2(error, capsys):
    def fail(args):
        raise error

    assert run_command(fail, ARGS) == 2
    cap = capsys.readouterr()
    assert (cap.out, cap.err) == ("", f"assocmem probe sounding: {error}\n")


def test_a_bug_keeps_its_traceback():
    def bug(args):
        raise RuntimeError("index out of range")

    with pytest.raises(RuntimeError, match="index out of range"):
        run_command(bug, ARGS)
    with pytest.raises(TypeError):  # not a user error unless the command says so (probe capacity does)
        run_command(lambda args: None + 1, ARGS)
    assert run_command(lambda args: None + 1, ARGS, USER_ERRORS + (TypeError,)) == 2
