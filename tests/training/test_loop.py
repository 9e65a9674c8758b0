"""The training loop in one process: learning, accumulation, bf16, run folders, eval CLI, schedule."""
import json
import math

import numpy as np
import pytest
import torch

from assocmem.cli import main as cli_main
from assocmem.training.config import config_from_dict, load_config
from assocmem.training.loop import train
from assocmem.training.objective import CausalLMObjective
from assocmem.training.optim import lr_factor
from assocmem.training.runlog import read_log
from assocmem.training.sampler import StepSampler
from assocmem.training.tasks import mqar_dataset
from training_helpers import BASE, TINY_LLAMA, merge

HYBRID = {"hf_config": None, "hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}}


def _losses(run_dir, split="train", key="loss"):
    return [r[key] for r in read_log(run_dir / "log.jsonl") if r["split"] == split]


def test_tiny_hybrid_learns_mqar(write_config, tmp_path):
    cfg = load_config(write_config("learn", {"model": HYBRID, "train": {"steps": 40, "batch_size": 16},
                                              "optim": {"lr": 1e-2, "warmup_steps": 4}}))
    summary = train(cfg)
    losses = _losses(tmp_path / "runs" / "learn")
    assert len(losses) == 40 and summary["steps"] == 40
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
    run = tmp_path / "runs" / "learn"
    for name in ("config.yaml", "curves.png", "summary.json", "final/config.json", "final/model.safetensors"):
        assert (run / name).is_file(), name
    assert _losses(run, "eval")[-1] == pytest.approx(summary["eval"]["loss"])


def test_gradient_accumulation_matches_one_big_batch(write_config, tmp_path):
    train(load_config(write_config("whole", {"train": {"steps": 4}})))
    train(load_config(write_config("micro", {"train": {"steps": 4, "micro_batch_size": 2}})))
    whole, micro = _losses(tmp_path / "runs" / "whole"), _losses(tmp_path / "runs" / "micro")
    np.testing.assert_allclose(micro, whole, rtol=0, atol=1e-5)
    assert whole[0] != whole[-1]


def test_bf16_autocast_tracks_fp32(write_config, tmp_path):
    train(load_config(write_config("fp32", {"train": {"steps": 2}})))
    train(load_config(write_config("bf16", {"train": {"steps": 2, "precision": "bf16"}})))
    fp32, bf16 = _losses(tmp_path / "runs" / "fp32"), _losses(tmp_path / "runs" / "bf16")
    np.testing.assert_allclose(bf16, fp32, rtol=2e-2)
    assert bf16 != fp32  # autocast did run in bfloat16


def test_run_folders_are_not_overwritten_unless_asked(write_config, tmp_path):
    path = write_config("once", {"train": {"steps": 1}, "optim": {"warmup_steps": 0}, "data": {"num_eval": 0}})
    train(load_config(path))
    with pytest.raises(FileExistsError, match="already exists"):
        train(load_config(path))
    assert cli_main(["train", str(path)]) == 2
    train(load_config(path), overwrite=True)
    with pytest.raises(ValueError, match=r"changed: \['optim.lr'\]"):
        train(load_config(path, ["optim.lr=1e-2"]), resume=True)


def test_eval_command_reproduces_the_final_evaluation(write_config, tmp_path, capsys):
    summary = train(load_config(write_config("ev", {"train": {"steps": 2}})))
    run = tmp_path / "runs" / "ev"
    assert cli_main(["eval", str(run)]) == 0
    metrics = json.loads((run / "eval.json").read_text())
    assert metrics["step"] == 2 and metrics["num_sequences"] == 32
    for key in ("loss", "perplexity", "accuracy"):
        assert metrics[key] == pytest.approx(summary["eval"][key], rel=1e-6)
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]), rel=1e-5)
    before = (run / "eval.json").read_text()
    again = ["eval", str(run), "--set", "data.num_kv_pairs=2", "--set", "data.num_eval=8"]
    assert cli_main(again) == 2  # an earlier evaluation is never replaced silently
    assert "eval.json exists (an earlier evaluation); pass --overwrite" in capsys.readouterr().err
    assert (run / "eval.json").read_text() == before
    assert cli_main([*again, "--overwrite"]) == 0
    assert json.loads((run / "eval.json").read_text())["num_sequences"] == 8
    other = tmp_path / "other.yaml"
    other.write_text("data: {kind: selective_copy, seq_len: 32, num_tokens: 4, vocab_size: 16, num_eval: 5}\n")
    assert cli_main(["eval", str(run), "--data", str(other), "--json", str(tmp_path / "o.json")]) == 0
    assert json.loads((tmp_path / "o.json").read_text())["num_sequences"] == 5
    other.write_text("data: {kind: mqar, seq_len: 32, num_kv_pairs: 4, vocab_size: 128, num_eval: 5}\n")
    assert cli_main(["eval", str(run), "--data", str(other)]) == 2  # more token ids than the model has


def test_supervised_logits_give_the_full_forward_loss():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    data = dict(TINY_LLAMA)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(data.pop("model_type"), vocab_size=64, **data))
    ds = mqar_dataset(4, 32, 4, vocab_size=64, seed=0).with_format("numpy")
    ids, labels = torch.as_tensor(ds[:]["input_ids"]).long(), torch.as_tensor(ds[:]["labels"]).long()
    fast = CausalLMObjective(model, "supervised")(ids, labels)
    full = CausalLMObjective(model, "all")(ids, labels)
    torch.testing.assert_close(fast[0], full[0])
    assert int(fast[1]) == int(full[1]) == 16
    hf_loss = model(input_ids=ids, labels=labels).loss  # HF's own shifted mean loss
    torch.testing.assert_close(full[0] / full[1], hf_loss)


def test_warmup_cosine_schedule():
    f = [lr_factor(s, total_steps=10, warmup_steps=2, min_lr_ratio=0.1) for s in range(10)]
    assert f[:2] == [0.5, 1.0]
    assert f[2] == pytest.approx(1.0) and f[6] == pytest.approx(0.1 + 0.9 * 0.5)
    assert f[-1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 7 / 8)))


def test_step_sampler_is_a_function_of_the_step():
    s = StepSampler(10, 4, seed=3)
    stream = np.concatenate([s.indices(k) for k in range(5)])        # 20 positions = 2 epochs
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:]) == list(range(10))
    assert not np.array_equal(stream[:10], stream[10:])
    np.testing.assert_array_equal(StepSampler(10, 4, seed=3).indices(3), s.indices(3))


def test_epochs_set_the_number_of_steps():
    cfg = config_from_dict(merge(BASE, {"train": {"steps": None, "epochs": 2.5, "batch_size": 64}}))
    assert cfg.train.total_steps(256) == 10
