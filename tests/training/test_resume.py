"""Exact resume: a run killed with SIGKILL mid-training and resumed ends with the weights of an
uninterrupted run, bit for bit."""
import os
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

from assocmem.training.checkpoint import latest_checkpoint
from assocmem.training.runlog import read_log
from training_helpers import PYTHON, REPO

# The child trains normally; each optimizer step also sleeps so that the parent can kill it
# reliably between two checkpoints (the sleep is outside the step and changes no number).
CHILD = """
import sys, time
import assocmem.training.loop as loop
from assocmem.training.config import load_config
step = loop.Trainer.train_step
def slow_step(self):
    out = step(self)
    time.sleep(float(sys.argv[2]))
    return out
loop.Trainer.train_step = slow_step
loop.train(load_config(sys.argv[1]), resume=sys.argv[3] == "resume")
"""

UPDATE = {"train": {"steps": 20, "checkpoint_every": 4, "keep_last": 2, "eval_batch_size": 32},
          "data": {"num_train": 96}}  # 96 rows / batch 8: the 20 steps cross epoch boundaries


def _start(script, config, delay, mode):
    return subprocess.Popen([PYTHON, str(script), str(config), str(delay), mode], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for_step(log, step, proc, timeout=240):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if any(r.get("step", 0) >= step for r in read_log(log)):
            return
        if proc.poll() is not None:
            pytest.fail(f"the child exited early: {proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    pytest.fail("the child did not reach the step in time")


def test_sigkill_then_resume_matches_an_uninterrupted_run(write_config, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    straight, killed = write_config("straight", UPDATE), write_config("killed", UPDATE)
    reference = _start(script, straight, 0.0, "fresh")
    victim = _start(script, killed, 0.4, "fresh")
    run = tmp_path / "runs" / "killed"
    _wait_for_step(run / "log.jsonl", 10, victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert not (run / "summary.json").exists()                 # it really died mid-run
    killed_at = max(r["step"] for r in read_log(run / "log.jsonl"))
    assert 10 <= killed_at < 20
    assert latest_checkpoint(run).name in {"step_00000008", "step_00000012", "step_00000016"}
    resumed = _start(script, killed, 0.0, "resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()[-2000:]
    assert reference.wait(timeout=300) == 0, reference.stderr.read()[-2000:]

    final = "checkpoints/step_00000020/model.safetensors"
    a = load_file(tmp_path / "runs" / "straight" / final)
    b = load_file(run / final)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equal(b[name]), name                   # bitwise
    log_a = [r for r in read_log(tmp_path / "runs" / "straight" / "log.jsonl") if r["split"] == "train"]
    log_b = [r for r in read_log(run / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in log_b] == list(range(1, 21))   # the log was cut back to the checkpoint
    assert [r["loss"] for r in log_a] == [r["loss"] for r in log_b]
