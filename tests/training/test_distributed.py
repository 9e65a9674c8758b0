"""Two processes under torchrun (DDP, gloo) match one process with the same global batch."""
import subprocess

import numpy as np
import pytest

from assocmem.training.runlog import read_log
from training_helpers import PYTHON, REPO

UPDATE = {"train": {"steps": 6, "batch_size": 8, "micro_batch_size": 2, "eval_batch_size": 16},
          "data": {"num_eval": 32}}


@pytest.mark.distributed
def test_two_gloo_processes_match_one_process(write_config, tmp_path):
    single = subprocess.Popen([PYTHON, "-m", "assocmem.cli", "train", str(write_config("one", UPDATE))],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pair = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "assocmem.cli", "train", str(write_config("two", UPDATE))],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert pair.wait(timeout=300) == 0, pair.stderr.read()[-3000:]
    assert single.wait(timeout=300) == 0, single.stderr.read()[-3000:]
    one = read_log(tmp_path / "runs" / "one" / "log.jsonl")
    two = read_log(tmp_path / "runs" / "two" / "log.jsonl")
    train_one = [r for r in one if r["split"] == "train"]
    train_two = [r for r in two if r["split"] == "train"]
    assert [r["step"] for r in train_two] == list(range(1, 7))
    np.testing.assert_allclose([r["loss"] for r in train_two], [r["loss"] for r in train_one], rtol=0, atol=1e-5)
    np.testing.assert_allclose([r["grad_norm"] for r in train_two], [r["grad_norm"] for r in train_one], rtol=1e-4)
    eval_one, eval_two = one[-1], two[-1]
    assert eval_one["split"] == eval_two["split"] == "eval"
    np.testing.assert_allclose(eval_two["loss"], eval_one["loss"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(eval_two["accuracy"], eval_one["accuracy"], rtol=0, atol=1e-6)
    summary = (tmp_path / "runs" / "two" / "summary.json").read_text()
    assert '"world_size": 2' in summary


@pytest.mark.distributed
def test_two_gloo_processes_match_one_process_with_gradient_transforms(write_config, tmp_path):
    """The transforms read the all-reduced gradient, which every rank holds, so they keep 2 == 1."""
    update = {**UPDATE, "train": {**UPDATE["train"], "grad_transforms": [
        {"kind": "fgp_adaptive", "param": "model.embed_tokens.weight", "top_k": 4},
        {"kind": "grokfast_ema", "alpha": 0.9, "lamb": 2.0}]}}
    single = subprocess.Popen([PYTHON, "-m", "assocmem.cli", "train", str(write_config("one", update))],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pair = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "assocmem.cli", "train", str(write_config("two", update))],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert pair.wait(timeout=300) == 0, pair.stderr.read()[-3000:]
    assert single.wait(timeout=300) == 0, single.stderr.read()[-3000:]
    train_one = [r for r in read_log(tmp_path / "runs" / "one" / "log.jsonl") if r["split"] == "train"]
    train_two = [r for r in read_log(tmp_path / "runs" / "two" / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in train_two] == list(range(1, 7))
    np.testing.assert_allclose([r["loss"] for r in train_two], [r["loss"] for r in train_one], rtol=0, atol=1e-5)
    np.testing.assert_allclose([r["grad_norm"] for r in train_two], [r["grad_norm"] for r in train_one], rtol=1e-4)
