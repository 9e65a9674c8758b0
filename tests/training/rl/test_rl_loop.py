"""The RL loop: the run-folder contract, exact resume after SIGKILL, two gloo processes = one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from assocmem.training.runlog import read_log
from assocmem.training.rl.config import load_rl_config
from assocmem.training.rl.loop import train_rl
from rl_helpers import PYTHON, REPO, write_config

CLI = [PYTHON, "-m", "assocmem.cli", "rl"]


def _weights(run_dir):
    return load_file(str(run_dir / "final" / "model.safetensors"))


def _train_records(run_dir):
    return [r for r in read_log(run_dir / "log.jsonl") if r["split"] == "train"]


@pytest.mark.parametrize("algorithm", ["policy_gradient", "balanced", "balanced_batch", "self_distillation"])
def test_a_run_writes_the_run_folder(tmp_path, algorithm):
    loss = {"algorithm": algorithm, **({"beta": 0.0} if algorithm == "self_distillation" else {})}  # SD takes no KL
    if algorithm == "balanced_batch":
        loss = {"algorithm": "balanced", "balance": "batch"}
    cfg = load_rl_config(write_config(tmp_path, algorithm, {"loss": loss,
                                                            "train": {"steps": 3, "eval_every": 2}}))
    summary = train_rl(cfg)
    run = tmp_path / "runs" / algorithm
    records = read_log(run / "log.jsonl")
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["step"] for r in records if r["split"] == "eval"] == [0, 2, 3]
    for r in train:
        assert 0 <= r["reward"] <= 1 and r["kl"] >= 0 and r["g_pos_norm"] >= 0 and r["g_neg_norm"] >= 0
        assert 1 <= r["length"] <= cfg.data.max_new_tokens
    assert any(r["g_pos_norm"] > 0 for r in train)  # the format reward gives the random model a signal
    assert summary["sampled_tokens"] == train[-1]["sampled_tokens"] == sum(
        round(r["length"] * 16) for r in train)  # 4 prompts × G = 4 per round
    assert summary["reference"]["source"] == "the initial policy"
    assert (run / "curves.png").stat().st_size > 0 and (run / "final" / "config.json").is_file()
    with pytest.raises(FileExistsError, match="already exists"):
        train_rl(cfg)
    if algorithm == "balanced_batch":
        for r in train:
            if r["g_neg_norm"] > 0:
                assert r["neg_scale"] == pytest.approx(r["g_pos_norm"] / (r["g_neg_norm"] + 1e-8), rel=1e-6)


def test_the_policy_learns_the_format_reward(tmp_path):
    """Plain GRPO on the format reward raises it within a few rounds (the loop optimises what it says)."""
    cfg = load_rl_config(write_config(tmp_path, "learn", {
        "loss": {"algorithm": "policy_gradient", "beta": 0.0, "inner_iterations": 1},
        "rollout": {"prompts_per_step": 8, "group_size": 8}, "optim": {"lr": 2e-2}, "train": {"steps": 12}}))
    train_rl(cfg)
    rewards = [r["reward"] for r in _train_records(tmp_path / "runs" / "learn")]
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.2, rewards


def _spawn(config, *extra):
    return subprocess.Popen([*CLI, str(config), *extra], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_sigkill_then_resume_is_bitwise_an_uninterrupted_run(tmp_path):
    update = {"train": {"steps": 14, "checkpoint_every": 1}}
    whole = _spawn(write_config(tmp_path, "whole", update))
    killed_cfg = write_config(tmp_path, "killed", update)
    victim = _spawn(killed_cfg)
    marker = tmp_path / "runs" / "killed" / "checkpoints" / "step_00000003"
    deadline = time.time() + 240
    while not marker.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert victim.poll() is None, "the run ended before it could be killed"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "runs" / "killed" / "final").exists()
    resumed = _spawn(killed_cfg, "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()[-3000:]
    assert whole.wait(timeout=300) == 0, whole.stderr.read()[-3000:]
    a, b = _weights(tmp_path / "runs" / "whole"), _weights(tmp_path / "runs" / "killed")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rs]  # noqa: E731
    assert strip(_train_records(tmp_path / "runs" / "killed")) == strip(_train_records(tmp_path / "runs" / "whole"))
    summary = json.loads((tmp_path / "runs" / "killed" / "summary.json").read_text())
    assert summary["steps"] == 14


def test_resume_refuses_a_changed_reference(tmp_path):
    cfg = load_rl_config(write_config(tmp_path, "ref", {"train": {"steps": 2}}))
    train_rl(cfg)
    folder = tmp_path / "runs" / "ref" / "final"
    changed = load_rl_config(write_config(tmp_path, "ref", {"train": {"steps": 3}, "reference": str(folder)}))
    with pytest.raises(ValueError, match="changed: \\['reference'\\]"):
        train_rl(changed, resume=True)


@pytest.mark.distributed
def test_two_gloo_processes_match_one_process(tmp_path):
    update = {"train": {"steps": 3}, "rollout": {"prompts_per_step": 4}}
    one = _spawn(write_config(tmp_path, "one", update))
    two = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                            "assocmem.cli", "rl", str(write_config(tmp_path, "two", update))], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert two.wait(timeout=300) == 0, two.stderr.read()[-3000:]
    assert one.wait(timeout=300) == 0, one.stderr.read()[-3000:]
    r1, r2 = _train_records(tmp_path / "runs" / "one"), _train_records(tmp_path / "runs" / "two")
    assert [r["step"] for r in r2] == [1, 2, 3]
    for a, b in zip(r1, r2):
        assert a["sampled_tokens"] == b["sampled_tokens"] and a["reward"] == b["reward"]  # the same samples
        for key in ("loss", "g_pos_norm", "g_neg_norm", "kl", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key
    w1, w2 = _weights(tmp_path / "runs" / "one"), _weights(tmp_path / "runs" / "two")
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=0, atol=1e-5)
    assert json.loads((tmp_path / "runs" / "two" / "summary.json").read_text())["world_size"] == 2
