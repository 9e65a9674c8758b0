"""Progress lines of long commands (training/progress.py): what they say, the estimate of the time
left, work finished out of order, and a command that reports through them."""
import io
import re

import pytest

from assocmem.training import progress as progress_module
from assocmem.training.progress import Progress, duration, progress


def test_durations_read_as_a_person_would_say_them():
    assert [duration(s) for s in (0.04, 41.25, 65, 599.6, 3725)] == ["0.0 s", "41.2 s", "1 min 05 s", "10 min 00 s",
                                                                      "1 h 02 min"]


@pytest.fixture
def clock(monkeypatch):
    """time.perf_counter returning the values the test pushes."""
    ticks = []
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: ticks.pop(0))
    return ticks


def test_a_sequential_loop_reports_each_item_and_the_time_left(clock):
    out = io.StringIO()
    clock.extend([0.0, 1.0, 11.0, 11.0, 41.0, 41.0, 61.0])  # begin; a: 1 -> 11; b: 11 -> 41; c: 41 -> 61
    seen = [x for x in progress(["a", "b", "c"], "demo", stream=out)]
    assert seen == ["a", "b", "c"]
    assert out.getvalue().splitlines() == [
        "demo [1/3] a ...",
        "demo [1/3] a done in 10.0 s (11.0 s so far, about 22.0 s left)",
        "demo [2/3] b ...",
        "demo [2/3] b done in 30.0 s (41.0 s so far, about 20.5 s left)",
        "demo [3/3] c ...",
        "demo [3/3] c done in 20.0 s (1 min 01 s so far)",
    ]


def test_work_finished_out_of_order_is_counted_without_a_duration(clock):
    out = io.StringIO()
    clock.extend([0.0, 30.0, 40.0])
    tracker = Progress(4, "pool", stream=out)
    tracker.done("run b", "loss 1.5")
    tracker.done("run a")
    assert out.getvalue().splitlines() == ["pool [1/4] run b done; loss 1.5 (30.0 s so far, about 1 min 30 s left)",
                                           "pool [2/4] run a done (40.0 s so far, about 40.0 s left)"]


def test_probe_recall_reports_every_model_it_trains_and_evaluates(tmp_path, capsys):
    from assocmem.cli import main as cli_main

    assert cli_main(["probe", "recall", "--train-mixers", "gdn", "attn", "--d-models", "16", "--steps", "2",
                     "--seq-len", "16", "--vocab-size", "32", "--train-kv-pairs", "2", "--num-kv-pairs", "2",
                     "--examples", "4",
                     "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    for i, mixer in enumerate(["gdn", "attn"], start=1):
        assert f"recall: training [{i}/2] {mixer}-d16 (2 steps) ...\n" in err
        assert re.search(rf"recall: training \[{i}/2\] {mixer}-d16 \(2 steps\) done in [0-9.]+ s", err)
        assert re.search(rf"recall: evaluating \[{i}/2\] {mixer}-d16 done in", err)
