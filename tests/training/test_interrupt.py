"""Ctrl-C during `assocmem train`: the step under way finishes, a checkpoint is written, the command exits
130 with one line naming the checkpoint and the resume command (no traceback), and --resume continues from
that checkpoint. A real SIGINT sent to a training subprocess."""
import json
import os
import signal
import subprocess
import sys
import time

import yaml

from training_helpers import BASE, merge


def _wait_for(predicate, timeout: float, proc) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_ctrl_c_writes_a_checkpoint_and_the_run_resumes(tmp_path):
    cfg = merge(BASE, {"name": "stopped", "output_dir": str(tmp_path / "runs"),
                       "train": {"steps": 100000, "checkpoint_every": 0, "eval_every": 0}})
    path = tmp_path / "stopped.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "runs" / "stopped"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "assocmem.cli", "train", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = run / "log.jsonl"
        _wait_for(lambda: log.is_file() and len(log.read_text().splitlines()) >= 3, 300, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert "stopped: Ctrl-C: finishing step" in err
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "train"]
    stopped_at = steps[-1]
    checkpoint = run / "checkpoints" / f"step_{stopped_at:08d}"
    last = err.strip().splitlines()[-1]
    assert last == (f"assocmem train: interrupted: checkpoint {checkpoint} (step {stopped_at} of 100000); resume "
                    f"with `assocmem train {run} --resume`")
    assert (checkpoint / "checksums.json").is_file() and not (run / "summary.json").exists()

    # resume (extended to two more steps than were done): it continues from the checkpoint to the end
    done = subprocess.run([sys.executable, "-m", "assocmem.cli", "train", str(run), "--resume",
                           "--set", f"train.steps={stopped_at + 2}"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == stopped_at + 2
    resumed = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()
               if json.loads(line).get("split") == "train"]
    assert resumed == list(range(1, stopped_at + 3))  # no step lost or repeated
