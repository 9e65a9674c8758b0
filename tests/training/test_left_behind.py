"""Nothing left behind, nothing unloadable loaded: a refused start writes no run folder; a killed prune leaves no
half-deleted step_* folder; a state.pt that pickles code behind resealed checksums falls back to the previous
checkpoint; a full disk during a checkpoint write says so and keeps the previous checkpoints; a symlinked
log.jsonl is replaced on resume, its target untouched; pickled weights are refused naming the file."""
from __future__ import annotations

import os

import pytest
import torch

from assocmem.cli import main as cli_main
from assocmem.training import checkpoint as ckpt
from assocmem.training import loop
from assocmem.training.config import load_config
from assocmem.training.loop import train
from assocmem.training.runlog import read_log

EVERY4 = {"train": {"steps": 8, "checkpoint_every": 4, "keep_last": 3}}


def test_a_start_refused_after_the_model_is_built_leaves_no_run_folder(write_config, tmp_path, monkeypatch, capsys):
    def refuse(*args):
        raise ValueError("logits differ; set train.logits: all")

    monkeypatch.setattr(loop, "check_supervised_logits", refuse)
    path = write_config("refused", {"train": {"steps": 2, "logits": "supervised"}})
    assert cli_main(["train", str(path)]) == 2
    assert "set train.logits: all" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "refused").exists()


def test_a_killed_prune_leaves_no_step_folder_behind(write_config, tmp_path, monkeypatch):
    path = write_config("prune", {"train": {"steps": 8, "checkpoint_every": 2, "keep_last": 1}})
    train(load_config(path))
    root = ckpt.checkpoint_dir(tmp_path / "runs" / "prune")
    assert sorted(p.name for p in root.iterdir()) == ["step_00000008"]
    (root / "step_00000002").mkdir()                           # what an older prune killed midway left
    (root / ".del-step_00000004-123").mkdir()                  # what a prune killed midway leaves now
    (root / ".del-step_00000004-123" / ckpt.STATE_FILE).write_bytes(b"half")
    ckpt.recover_interrupted_writes(tmp_path / "runs" / "prune")
    assert sorted(p.name for p in root.iterdir()) == ["step_00000008"]


def test_a_state_that_pickles_code_behind_resealed_checksums_falls_back(write_config, tmp_path):
    path = write_config("evil", EVERY4)
    train(load_config(path))
    run = tmp_path / "runs" / "evil"
    victim = ckpt.checkpoint_dir(run) / "step_00000008"
    torch.save({"step": 8, "payload": os.system}, victim / ckpt.STATE_FILE)  # a global weights_only refuses
    ckpt.seal_checkpoint(victim)                                            # checksums recomputed over it
    with pytest.warns(ckpt.CheckpointWarning, match=r"step_00000008/state.pt does not load as plain tensors and "
                                                    r"values \(UnpicklingError: Trying to load unsupported GLOBAL posix.system.*using .*step_00000004"):
        summary = train(load_config(path), resume=True)
    assert summary["steps"] == 8
    assert (ckpt.checkpoint_dir(run) / "damaged-step_00000008").is_dir()


def test_a_full_disk_during_a_checkpoint_write_names_the_disk_and_keeps_the_others(write_config, tmp_path,
                                                                                   monkeypatch, capsys):
    path = write_config("full", EVERY4)
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if ckpt.checkpoint_dir(tmp_path / "runs" / "full").joinpath("step_00000004").exists():
            raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                               "data/0: file write failed; unexpected pos 4160 vs 4096")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    assert cli_main(["train", str(path)]) == 1
    err = capsys.readouterr().err
    assert "writing checkpoint step 8 failed (RuntimeError" in err and "MiB free on the disk of" in err
    assert "the disk is (nearly) full: free space and resume with --resume" in err
    root = ckpt.checkpoint_dir(tmp_path / "runs" / "full")
    assert sorted(p.name for p in root.iterdir()) == ["step_00000004"]  # no half-written step 8
    assert ckpt.latest_valid_checkpoint(tmp_path / "runs" / "full") == root / "step_00000004"


def test_a_symlinked_log_is_replaced_on_resume_and_its_target_kept(write_config, tmp_path):
    path = write_config("linked", EVERY4)
    train(load_config(path))
    run = tmp_path / "runs" / "linked"
    elsewhere = tmp_path / "elsewhere.jsonl"
    os.replace(run / "log.jsonl", elsewhere)
    (run / "log.jsonl").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    train(load_config(path, ["train.steps=12"]), resume=True)
    assert elsewhere.read_bytes() == before
    assert not (run / "log.jsonl").is_symlink()
    assert [r["step"] for r in read_log(run / "log.jsonl") if r["split"] == "train"][-1] == 12


def test_pickled_weights_are_refused_naming_the_file(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")

    folder = tmp_path / "pickled"
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    cfg.save_pretrained(folder)
    torch.save({**model.state_dict(), "payload": os.system}, folder / "pytorch_model.bin")
    assert cli_main(["probe", "causality", str(folder), "--seq-len", "5", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"the weights in {folder} (pytorch_model.bin) hold pickled Python objects beyond tensors" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_an_empty_config_and_log_left_by_a_full_disk_give_way_to_overwrite(write_config, tmp_path, capsys):
    path = write_config("zero", {"train": {"steps": 2}})
    run = tmp_path / "runs" / "zero"
    run.mkdir(parents=True)
    (run / "config.yaml").write_bytes(b"")
    (run / "log.jsonl").write_bytes(b"")
    assert cli_main(["train", str(path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli_main(["train", str(path), "--overwrite"]) == 0
    assert (run / "summary.json").is_file()


@pytest.mark.parametrize("value, where", [(".inf", "rope_theta is inf"), (".nan", "rope_theta is nan"),
                                          ("[1.0, -.inf]", r"rope_theta\[1\] is -inf")])
def test_non_finite_numbers_in_hf_config_are_refused_naming_the_key(write_config, capsys, value, where):
    import re

    path = write_config("nan")
    assert cli_main(["train", str(path), "--set", f"model.hf_config.rope_theta={value}", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert re.search(f"model.hf_config.{where}; every number of the model config must be finite", err), err
