"""Checkpoints: exact round trip, weights_only loading, atomic writes, checksums, keep-last-N."""
import hashlib
import json
import random
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import save_model
from torch import nn

from assocmem.training import checkpoint as ckpt


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 4)
        self.head = nn.Linear(4, 11, bias=False)
        self.head.weight = self.embed.weight  # shared tensor, stored once by safetensors
        self.norm = nn.LayerNorm(4)


def _trained(seed=0):
    torch.manual_seed(seed)
    model = Tied()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.head(model.norm(model.embed(torch.tensor([1, 2, 3])))).square().mean().backward()
    opt.step()
    return model, opt


def _state(opt):
    return {"optimizer": opt.state_dict(), "rng": [ckpt.rng_state()], "samples_seen": 3}


def test_round_trip_is_exact_and_loads_with_weights_only(tmp_path):
    model, opt = _trained()
    path = ckpt.save_checkpoint(tmp_path, 3, model, _state(opt), keep_last=2)
    assert path.name == "step_00000003"
    state = torch.load(path / ckpt.STATE_FILE, weights_only=True)  # no arbitrary pickles
    fresh, _ = _trained(seed=1)
    ckpt.load_weights(path, fresh)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert fresh.head.weight.data_ptr() == fresh.embed.weight.data_ptr()
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    opt2.load_state_dict(state["optimizer"])
    torch.testing.assert_close(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"],
                               rtol=0, atol=0)
    assert state["step"] == 3 and state["samples_seen"] == 3


def test_rng_state_restores_every_generator():
    saved = ckpt.rng_state()
    first = (torch.rand(3), np.random.rand(3), random.random())
    torch.rand(5), np.random.rand(5), random.random()
    ckpt.set_rng_state(saved)
    second = (torch.rand(3), np.random.rand(3), random.random())
    torch.testing.assert_close(first[0], second[0], rtol=0, atol=0)
    np.testing.assert_array_equal(first[1], second[1])
    assert first[2] == second[2]


def test_keep_last_n(tmp_path):
    model, opt = _trained()
    for step in (2, 4, 6, 8):
        ckpt.save_checkpoint(tmp_path, step, model, _state(opt), keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000006", "step_00000008"]
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000008"


def test_a_failed_write_leaves_the_previous_checkpoints_intact(tmp_path, monkeypatch):
    model, opt = _trained()
    ckpt.save_checkpoint(tmp_path, 2, model, _state(opt), keep_last=1)

    def crash(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(ckpt.CheckpointError, match=r"writing checkpoint step 4 failed \(OSError: disk full\); "
                                                  r"[0-9.]+ MiB free on the disk of .*Nothing of step 4 was kept"):
        ckpt.save_checkpoint(tmp_path, 4, model, _state(opt), keep_last=1)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000002"]
    assert not list(ckpt.checkpoint_dir(tmp_path).glob(".tmp-*"))


def test_a_killed_writer_leaves_only_an_ignored_temporary(tmp_path):
    model, opt = _trained()
    ckpt.save_checkpoint(tmp_path, 2, model, _state(opt), keep_last=3)
    torn = ckpt.checkpoint_dir(tmp_path) / ".tmp-step_00000004-999"  # what SIGKILL mid-write leaves
    torn.mkdir()
    (torn / ckpt.WEIGHTS_FILE).write_bytes(b"partial")
    incomplete = ckpt.checkpoint_dir(tmp_path) / "step_00000006"      # a folder without its state file
    incomplete.mkdir()
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000002"
    ckpt.recover_interrupted_writes(tmp_path)
    assert not torn.exists()
    assert ckpt.latest_valid_checkpoint(tmp_path).name == "step_00000002"


def test_a_complete_temporary_is_promoted_and_a_set_aside_one_restored(tmp_path):
    """Killed after the manifest was written but before the rename: the checkpoint is kept, not deleted."""
    model, opt = _trained()
    done = ckpt.save_checkpoint(tmp_path, 4, model, _state(opt), keep_last=3)
    root = ckpt.checkpoint_dir(tmp_path)
    done.rename(root / ".tmp-step_00000004-77")
    ckpt.save_checkpoint(tmp_path, 6, model, _state(opt), keep_last=3).rename(root / ".old-step_00000006-78")
    ckpt.save_checkpoint(tmp_path, 8, model, _state(opt), keep_last=3)
    (root / ".old-step_00000008-79").mkdir()                           # its replacement did arrive: deleted
    ckpt.recover_interrupted_writes(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == ["step_00000004", "step_00000006", "step_00000008"]
    assert all(ckpt.checkpoint_problem(p) is None for p in root.iterdir())


def test_checksums_are_written_and_every_kind_of_damage_is_named(tmp_path):
    model, opt = _trained()
    path = ckpt.save_checkpoint(tmp_path, 3, model, _state(opt), keep_last=2)
    manifest = json.loads((path / ckpt.MANIFEST_FILE).read_text())
    for name in (ckpt.WEIGHTS_FILE, ckpt.STATE_FILE):
        data = (path / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert ckpt.checkpoint_problem(path) is None
    weights = (path / ckpt.WEIGHTS_FILE).read_bytes()
    (path / ckpt.WEIGHTS_FILE).write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))   # one bit
    assert "model.safetensors does not match its SHA-256" in ckpt.checkpoint_problem(path)
    (path / ckpt.WEIGHTS_FILE).write_bytes(weights[:-8])
    assert "has %d bytes, its checksum was taken over %d" % (len(weights) - 8, len(weights)) \
        in ckpt.checkpoint_problem(path)
    (path / ckpt.WEIGHTS_FILE).write_bytes(weights)
    (path / ckpt.MANIFEST_FILE).write_text("{not json")
    assert "checksums.json is unreadable" in ckpt.checkpoint_problem(path)
    (path / ckpt.MANIFEST_FILE).unlink()
    assert "written without checksums" in ckpt.checkpoint_problem(path)
    with pytest.raises(ckpt.CheckpointError, match="step_00000003 is damaged: .*checksums.json is missing"):
        ckpt.verify_checkpoint(path)


def test_non_finite_weights_are_never_saved_nor_resumed(tmp_path):
    model, opt = _trained()
    good = ckpt.save_checkpoint(tmp_path, 2, model, _state(opt), keep_last=1)
    with torch.no_grad():
        model.norm.weight[1] = float("nan")
    with pytest.raises(ckpt.CheckpointError, match="weight norm.weight holds NaN or inf"):
        ckpt.save_checkpoint(tmp_path, 4, model, _state(opt), keep_last=1)
    assert ckpt.list_checkpoints(tmp_path) == [good]
    bad = ckpt.checkpoint_dir(tmp_path) / "step_00000004"               # written by something else: refused
    shutil.copytree(good, bad)
    save_model(model, str(bad / ckpt.WEIGHTS_FILE))
    data = (bad / ckpt.WEIGHTS_FILE).read_bytes()
    (bad / ckpt.MANIFEST_FILE).write_text(json.dumps({"files": {
        ckpt.WEIGHTS_FILE: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)},
        ckpt.STATE_FILE: json.loads((good / ckpt.MANIFEST_FILE).read_text())["files"][ckpt.STATE_FILE]}}))
    assert ckpt.checkpoint_problem(bad).endswith("holds non-finite values in norm.weight")
    with pytest.warns(ckpt.CheckpointWarning, match="non-finite values in norm.weight.*; using .*step_00000002"):
        assert ckpt.latest_valid_checkpoint(tmp_path) == good


def test_keep_last_never_deletes_the_newest_verified_checkpoint(tmp_path):
    """A newer (damaged) step left on disk must not push the checkpoint just written out of keep_last."""
    model, opt = _trained()
    newer = ckpt.save_checkpoint(tmp_path, 9, model, _state(opt), keep_last=1)
    (newer / ckpt.STATE_FILE).write_bytes(b"rotten")
    written = ckpt.save_checkpoint(tmp_path, 5, model, _state(opt), keep_last=1)
    assert ckpt.list_checkpoints(tmp_path) == [written, newer]
    with pytest.warns(ckpt.CheckpointWarning, match="step_00000009/state.pt has 6 bytes"):
        assert ckpt.latest_valid_checkpoint(tmp_path) == written


def test_keep_last_must_be_positive(tmp_path):
    model, opt = _trained()
    with pytest.raises(ValueError, match="keep_last"):
        ckpt.save_checkpoint(tmp_path, 1, model, _state(opt), keep_last=0)


def test_a_second_corruption_of_one_step_keeps_the_first_set_aside_copy(tmp_path):
    model, opt = _trained()
    for step in (1, 2):
        ckpt.save_checkpoint(tmp_path, step, model, _state(opt), keep_last=3)
    root = ckpt.checkpoint_dir(tmp_path)
    for attempt in (1, 2, 3):
        (root / "step_00000002" / ckpt.STATE_FILE).write_bytes(f"damage {attempt}".encode())
        with pytest.warns(ckpt.CheckpointWarning, match="state.pt has 8 bytes"):
            assert ckpt.latest_valid_checkpoint(tmp_path, set_aside=True) == root / "step_00000001"
        ckpt.save_checkpoint(tmp_path, 2, model, _state(opt), keep_last=3)  # the run goes on, step 2 again
    kept = {p.name: (p / ckpt.STATE_FILE).read_bytes() for p in root.iterdir() if p.name.startswith("damaged-")}
    assert kept == {"damaged-step_00000002": b"damage 1", "damaged-step_00000002-2": b"damage 2",
                    "damaged-step_00000002-3": b"damage 3"}
