"""RL gets the training loop's guards: a non-finite gradient (huge loss.beta or optim.lr) stops the run with
the round and what to change (train.on_nonfinite: stop) or skips the step (skip); an output_dir that is a file
is a user error; a run killed before its first checkpoint logs its round-0 evaluation once after --resume."""
from __future__ import annotations

import pytest

from assocmem.cli import main
from assocmem.training.rl.config import load_rl_config
from assocmem.training.rl.loop import RLTrainer, train_rl
from assocmem.training.runlog import read_log
from rl_helpers import write_config

pytestmark = pytest.mark.usefixtures("one_thread")
SHORT = {"steps": 2, "progress": False, "threads": 1, "eval_samples": 2}


@pytest.mark.parametrize("update, where, names", [
    ({"loss": {"beta": 1e300}}, "round 1, inner iteration 1 of 2", "lower loss.beta (1e+300)"),
    ({"optim": {"lr": 1e30}}, "round 1, inner iteration 2 of 2", "or optim.lr (1e+30)"),
])
def test_a_non_finite_gradient_stops_the_run_naming_the_round(tmp_path, capsys, update, where, names):
    path = write_config(tmp_path, "hot", {**update, "train": SHORT})
    assert main(["rl", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"non-finite gradient norm (nan) at {where}" in err and names in err
    assert "--set train.on_nonfinite=skip" in err and "Traceback" not in err
    assert main(["rl", str(path), "--overwrite", "--set", "train.on_nonfinite=skip"]) == 0
    train = [r for r in read_log(tmp_path / "runs" / "hot" / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2] and train[-1]["skipped_steps"] >= 1


def test_an_output_dir_that_is_a_file_exits_2(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    path = write_config(tmp_path, "f", {"output_dir": str(tmp_path / "afile"), "train": SHORT})
    assert main(["rl", str(path)]) == 2
    assert "output_dir" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "x"


class Killed(Exception):
    pass


def test_a_run_killed_before_its_first_checkpoint_logs_round_0_once(tmp_path, monkeypatch):
    cfg = load_rl_config(write_config(tmp_path, "k", {"train": SHORT}))

    def killed(self):
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(RLTrainer, "train_step", killed)
        with pytest.raises(Killed):
            train_rl(cfg)
    train_rl(cfg, resume=True)
    evals = [r["step"] for r in read_log(tmp_path / "runs" / "k" / "log.jsonl") if r["split"] == "eval"]
    assert evals == [0, 2]


def test_out_of_memory_in_a_round_names_the_round_the_checkpoint_and_what_to_lower(tmp_path, monkeypatch, capsys):
    """An allocation failure injected into round 3 (checkpoint at round 2): one line, exit 1."""
    import torch

    path = write_config(tmp_path, "oom", {"train": {**SHORT, "steps": 4, "checkpoint_every": 2}})
    original = RLTrainer.train_step

    def round_or_fail(self):
        if self.step + 1 == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return original(self)

    monkeypatch.setattr(RLTrainer, "train_step", round_or_fail)
    assert main(["rl", str(path)]) == 1
    err = capsys.readouterr().err
    run = tmp_path / "runs" / "oom"
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.strip() == (f"error: out of GPU memory in round 3 of 4 (CUDA out of memory. Tried to allocate 1.00 GiB); "
                           f"saved: checkpoint {run / 'checkpoints' / 'step_00000002'}; lower rollout.prompts_per_step "
                           f"(now 4) or rollout.group_size (now 4) or train.eval_batch_size (now 64), then resume with "
                           f"`assocmem rl CONFIG --resume ({run})`")
