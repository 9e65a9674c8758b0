"""Fault injection on run folders and checkpoints: nothing a user made is lost, nothing fails silently.

Each test reproduces one failure of issue 18 (path traversal through the run name, a corrupted
checkpoint, a non-finite loss, a run that fails while building its data, an interrupted
re-save, a moved or extended run) and checks the files on disk afterwards.
"""
import json
import os
import re
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file

from assocmem.training import checkpoint as ckpt
from assocmem.training import loop
from assocmem.cli import main as cli_main
from assocmem.training.config import ConfigError, load_config
from assocmem.training.loop import NonFiniteLossError, train
from assocmem.training.optim import lr_factor
from assocmem.training.runlog import read_log

EVERY4 = {"train": {"steps": 12, "checkpoint_every": 4, "keep_last": 3}}


def _tree(path):
    """Every file under ``path`` with its bytes (what 'nothing touched' compares)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _weights(run_dir, step):
    return load_file(run_dir / "checkpoints" / f"step_{step:08d}" / ckpt.WEIGHTS_FILE)


def _assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equal(b[name]), name  # bitwise


# ----------------------------------------------------------------------------- 1. path safety
@pytest.mark.parametrize("name", ["../outside", "..", ".", "", "a/b", "/abs", ".hidden", "-flag", "x" * 201,
                                  "sp ace", "back\\slash"])
def test_unsafe_run_names_are_refused_before_anything_is_written(write_config, tmp_path, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    before = _tree(tmp_path)
    path = write_config("cfg", {"name": name})
    with pytest.raises(ConfigError, match=r"name: .*single safe folder name; use letters, digits"):
        load_config(path)
    assert cli_main(["train", str(path), "--overwrite"]) == 2
    assert cli_main(["train", str(path), "--set", f"name={name}", "--overwrite"]) == 2
    assert _tree(tmp_path) == {**before, "cfg.yaml": path.read_bytes()}
    assert not (tmp_path / "runs").exists()


def test_overwrite_deletes_only_a_recognised_run_folder(write_config, tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "mine").mkdir(parents=True)
    (runs / "mine" / "notes.txt").write_text("not a run")                  # a user's folder, no config/log
    (runs / "elsewhere").mkdir()
    (runs / "elsewhere" / "data.bin").write_bytes(b"\x00\x01")
    (runs / "linked").symlink_to(runs / "elsewhere", target_is_directory=True)
    before = _tree(tmp_path)
    for name in ("mine", "linked"):
        path = write_config(name, {"train": {"steps": 1}, "optim": {"warmup_steps": 0}})
        assert cli_main(["train", str(path), "--overwrite"]) == 2
        assert "--overwrite deletes only a run folder" in capsys.readouterr().err
    assert {k: v for k, v in _tree(tmp_path).items() if not k.endswith(".yaml")} == \
        {k: v for k, v in before.items() if not k.endswith(".yaml")}
    # a real run folder is replaced
    path = write_config("real", {"train": {"steps": 1}, "optim": {"warmup_steps": 0}})
    train(load_config(path))
    (runs / "real" / "extra.txt").write_text("inside the run: goes with it")
    train(load_config(path), overwrite=True)
    assert not (runs / "real" / "extra.txt").exists() and (runs / "real" / "summary.json").is_file()


def test_output_dir_that_is_a_file_is_refused(write_config, tmp_path, capsys):
    target = tmp_path / "afile"
    target.write_text("x")
    path = write_config("f", {"output_dir": str(target)})
    assert cli_main(["train", str(path)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert target.read_text() == "x"


# ----------------------------------------------------------------------------- 2. checkpoint integrity
def _flip(path, offset_from_end=200, count=64):
    data = bytearray(path.read_bytes())
    start = max(0, len(data) - offset_from_end)
    for i in range(start, min(start + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("victim", [ckpt.WEIGHTS_FILE, ckpt.STATE_FILE])
def test_a_corrupted_checkpoint_falls_back_to_the_previous_one_and_resumes_exactly(write_config, tmp_path, victim):
    straight = train(load_config(write_config("straight", EVERY4)))
    path = write_config("hurt", EVERY4)
    train(load_config(path))                                             # checkpoints 4, 8 and 12
    run = tmp_path / "runs" / "hurt"
    _flip(run / "checkpoints" / "step_00000012" / victim)
    with pytest.warns(ckpt.CheckpointWarning, match=f"step_00000012/{victim}.*does not match its SHA-256"):
        summary = train(load_config(path), resume=True)                  # from step 8, not from the bad 12
    assert summary["steps"] == straight["steps"] == 12
    _assert_same_weights(_weights(run, 12), _weights(tmp_path / "runs" / "straight", 12))
    assert (run / "checkpoints" / "damaged-step_00000012" / victim).is_file()  # set aside, not deleted
    losses = [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in read_log(run / "log.jsonl") if r["split"] == "train"] == list(range(1, 13))
    assert all(torch.isfinite(torch.tensor(losses)))


def test_no_verified_checkpoint_stops_the_resume_and_deletes_nothing(write_config, tmp_path, capsys):
    path = write_config("allbad", {"train": {"steps": 8, "checkpoint_every": 4}})
    train(load_config(path))
    run = tmp_path / "runs" / "allbad"
    for step in (4, 8):
        _flip(run / "checkpoints" / f"step_{step:08d}" / ckpt.WEIGHTS_FILE)
    before = _tree(run / "checkpoints")
    for _ in range(2):                                                   # and again: still refused
        assert cli_main(["train", str(path), "--resume"]) == 1
        err = capsys.readouterr().err
        assert "no checkpoint of" in err and "step_00000004/model.safetensors does not match" in err
        assert _tree(run / "checkpoints") == before


# ----------------------------------------------------------------------------- non-finite loss
def _poison(monkeypatch, at_call):
    """The objective returns a NaN loss on its ``at_call``-th forward (1-based), as a diverged model would."""
    calls = {"n": 0}
    forward = loop.CausalLMObjective.forward

    def poisoned(self, input_ids, labels, attention_mask=None):
        loss_sum, count, correct = forward(self, input_ids, labels, attention_mask)
        if self.training:
            calls["n"] += 1
            if calls["n"] == at_call:
                loss_sum = loss_sum * float("nan")
        return loss_sum, count, correct
    monkeypatch.setattr(loop.CausalLMObjective, "forward", poisoned)


def test_a_non_finite_loss_stops_the_run_naming_the_step(write_config, tmp_path, monkeypatch, capsys):
    path = write_config("nan", {"train": {"steps": 12, "checkpoint_every": 4, "micro_batch_size": 4}})
    _poison(monkeypatch, at_call=2 * 6 + 2)                              # step 7, its second micro-batch
    assert cli_main(["train", str(path)]) == 1
    err = capsys.readouterr().err
    assert "non-finite training loss at step 7 (batch index 6" in err
    assert "micro-batch 1 of 2 (dataset rows [" in err and "step_00000004" in err
    run = tmp_path / "runs" / "nan"
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step_00000004"]
    assert ckpt.checkpoint_problem(run / "checkpoints" / "step_00000004") is None
    assert not (run / "summary.json").exists()
    assert max(r["step"] for r in read_log(run / "log.jsonl")) == 6


def test_on_nonfinite_skip_skips_the_update_and_counts_it(write_config, tmp_path, monkeypatch):
    cfg = load_config(write_config("skip", {"train": {"steps": 6, "on_nonfinite": "skip"}}))
    _poison(monkeypatch, at_call=3)
    summary = train(cfg)
    records = [r for r in read_log(tmp_path / "runs" / "skip" / "log.jsonl") if r["split"] == "train"]
    assert [r["skipped_steps"] for r in records] == [0, 0, 1, 1, 1, 1]
    assert summary["steps"] == 6 and all(torch.isfinite(t).all() for t in _weights(tmp_path / "runs" / "skip", 6).values())


def test_skip_keeps_a_gradient_transforms_state_finite(write_config, tmp_path, monkeypatch):
    ema = {"kind": "grokfast_ema", "alpha": 0.9, "lamb": 1.0}
    cfg = load_config(write_config("ema", {"train": {"steps": 4, "on_nonfinite": "skip", "grad_transforms": [ema]}}))
    _poison(monkeypatch, at_call=2)
    train(cfg)
    state = ckpt.load_state(tmp_path / "runs" / "ema" / "checkpoints" / "step_00000004")
    tensors = list(state["grad_transforms"][0]["state"].values())
    assert tensors and all(torch.isfinite(t).all() for t in tensors)
    assert state["skipped_steps"] == 1


def test_non_finite_config_values_are_refused(write_config):
    for override in ("optim.lr=.inf", "optim.lr=.nan", "optim.weight_decay=.inf", "optim.eps=-.inf",
                     "optim.grad_clip=.nan"):
        key = override.split("=")[0].split(".")[-1]
        with pytest.raises(ConfigError, match=rf"{key}: Input should be a finite number"):
            load_config(write_config("c"), [override])


# ----------------------------------------------------------------------------- run folder lifecycle
def test_a_run_that_fails_building_its_data_leaves_no_folder(write_config, tmp_path, capsys):
    path = write_config("files")
    data = yaml.safe_load(path.read_text())
    data["data"] = {"kind": "files", "train_files": [str(tmp_path / "missing.txt")], "seq_len": 16}
    path.write_text(yaml.safe_dump(data))
    assert cli_main(["train", str(path)]) == 2
    assert "missing.txt" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "files").exists()
    (tmp_path / "missing.txt").write_text("hello world, " * 400)
    assert cli_main(["train", str(path), "--set", "train.steps=1", "--set", "optim.warmup_steps=0"]) == 0


def test_resume_a_moved_run_folder_and_extend_it(write_config, tmp_path):
    train(load_config(write_config("move", {"train": {"steps": 8, "checkpoint_every": 4}})))
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(tmp_path / "runs" / "move", moved)
    assert cli_main(["train", str(moved), "--resume", "--set", "train.steps=12"]) == 0
    records = [r for r in read_log(moved / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in records] == list(range(1, 13))
    # the documented rule: from the resume step on, the schedule of a 12-step run
    for r in records[8:]:
        assert r["lr"] == pytest.approx(3e-3 * lr_factor(r["step"] - 1, total_steps=12, warmup_steps=2,
                                                         min_lr_ratio=0.0), rel=1e-12)
    assert records[7]["lr"] == pytest.approx(3e-3 * lr_factor(7, total_steps=8, warmup_steps=2, min_lr_ratio=0.0))
    saved = load_config(moved / "config.yaml")
    assert saved.train.steps == 12 and saved.name == "moved" and saved.output_dir == str(moved.parent)
    assert json.loads((moved / "summary.json").read_text())["steps"] == 12
    assert cli_main(["train", str(moved)]) == 2                          # a folder needs --resume


def test_resuming_a_finished_run_changes_nothing(write_config, tmp_path):
    path = write_config("done", {"train": {"steps": 4}})
    first = train(load_config(path))
    run = tmp_path / "runs" / "done"
    before = _tree(run)
    assert train(load_config(path), resume=True) == json.loads(json.dumps(first))
    assert _tree(run) == before                                           # no duplicate eval line, no re-save


def test_resume_refuses_a_checkpoint_beyond_the_new_end(write_config, tmp_path, capsys):
    path = write_config("short", {"train": {"steps": 8, "checkpoint_every": 4}})
    train(load_config(path))
    assert cli_main(["train", str(path), "--resume", "--set", "train.steps=6"]) == 2
    assert "beyond this run's 6 steps" in capsys.readouterr().err


def test_invalid_yaml_is_a_message_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {hybrid: [\n")
    assert cli_main(["train", str(bad)]) == 2
    assert "bad.yaml, line 2, column 1: not valid YAML" in capsys.readouterr().err


# ----------------------------------------------------------------------------- interrupted writes (fast)
def test_a_resave_killed_between_its_renames_loses_nothing(write_config, tmp_path, monkeypatch):
    """Kill between 'set the old step aside' and 'rename the new one in': resume finds the old one back."""
    cfg = load_config(write_config("resave", {"train": {"steps": 4}}))
    train(cfg)
    run = tmp_path / "runs" / "resave"
    original = _weights(run, 4)
    model = loop.build_from_config(cfg.model, vocab_size=64)
    renames = []
    real_rename = os.rename

    def dying_rename(src, dst):
        renames.append((str(src), str(dst)))
        if len(renames) == 2:
            raise KeyboardInterrupt("killed")                            # the second rename never happens
        real_rename(src, dst)
    monkeypatch.setattr(ckpt.os, "rename", dying_rename)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(run, 4, model, {"x": torch.zeros(1)}, keep_last=2)
    monkeypatch.setattr(ckpt.os, "rename", real_rename)
    assert not (run / "checkpoints" / "step_00000004").exists()
    ckpt.recover_interrupted_writes(run)
    _assert_same_weights(_weights(run, 4), original)
    assert ckpt.checkpoint_problem(run / "checkpoints" / "step_00000004") is None


# ----------------------------------------------------------------------------- eval
def test_eval_checks_its_inputs_and_outputs_before_the_work(write_config, tmp_path, capsys, monkeypatch):
    train(load_config(write_config("ev", {"train": {"steps": 2}})))
    run = tmp_path / "runs" / "ev"
    from assocmem.training import evaluate as evaluate_module

    def no_work(*args, **kwargs):
        raise AssertionError("the metrics were computed before the inputs were checked")
    monkeypatch.setattr(evaluate_module, "evaluate", no_work)
    cases = [(["--json", str(tmp_path / "nowhere" / "m.json")], "the folder .*nowhere does not exist", 2),
             (["--json", str(tmp_path)], "is a folder; give a file path", 2),
             (["--checkpoint", str(run / "checkpoints" / "nope")], "nope is damaged: .* is missing", 1)]
    for extra, message, code in cases:
        assert cli_main(["eval", str(run), *extra]) == code, extra
        assert re.search(message, capsys.readouterr().err), extra
    for bad in ("-3", "0"):  # refused by argparse (cli/types.positive_int), before anything runs
        with pytest.raises(SystemExit) as exit_:
            cli_main(["eval", str(run), "--batch-size", bad])
        assert exit_.value.code == 2
        assert f"argument --batch-size: must be an integer >= 1, got '{bad}'" in capsys.readouterr().err
    _flip(run / "checkpoints" / "step_00000002" / ckpt.STATE_FILE)
    assert cli_main(["eval", str(run)]) == 1
    assert "state.pt does not match its SHA-256" in capsys.readouterr().err
    assert not (run / "eval.json").exists()


# ----------------------------------------------------------------------------- remote code
def test_a_model_folder_never_runs_code_it_carries(tmp_path):
    """A config.json whose auto_map points at a Python file in the folder: refused, the file never runs
    (transformers would otherwise ask interactively, and 'y' would execute it)."""
    from assocmem.probes.io import load_model
    from assocmem.training.model_factory import load_pretrained

    folder = tmp_path / "evil"
    folder.mkdir()
    marker = tmp_path / "ran.txt"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (folder / "config.json").write_text(json.dumps({
        "model_type": "evil", "architectures": ["EvilForCausalLM"],
        "auto_map": {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}}))
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_pretrained(folder)
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_model(str(folder))
    assert not marker.exists()
