"""`assocmem rl` shows progress from its first second: the bar is up before the step-0 held-out
evaluation (which samples for a while) and says so."""
from __future__ import annotations

import pytest

from assocmem.cli import main
from rl_helpers import write_config

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_bar_is_up_during_the_step_0_evaluation(tmp_path, capsys):
    path = write_config(tmp_path, "p", {"train": {"steps": 1, "progress": True, "threads": 1, "eval_samples": 2}})
    assert main(["rl", str(path)]) == 0
    err = capsys.readouterr().err
    first = err.index("0/1")
    assert "held-out evaluation before round 1" in err[first:first + 200]
    assert "1/1" in err[first:]
