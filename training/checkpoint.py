"""Checkpoints: safetensors weights + a weights_only-loadable training state, written atomically.

Layout of a run folder:

    <run>/checkpoints/step_00000120/model.safetensors   weights (safetensors.torch.save_model;
                                                         tied tensors stored once)
    <run>/checkpoints/step_00000120/state.pt            optimizer, scheduler, RNG states of every
                                                         rank, step, data position and the gradient
                                                         transforms' state (torch.save of
                                                         tensors and plain Python values only, so
                                                         torch.load(weights_only=True) reads it)

A checkpoint is written into ``checkpoints/.tmp-step_...`` and renamed to its
final name only once both files are complete and fsynced: a process killed at
any moment leaves either the previous checkpoints or the new one, never a
partial one (stale ``.tmp-*`` folders are ignored and removed). Only the
newest ``keep_last`` checkpoints are kept.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

_STEP_DIR = re.compile(r"^step_(\d{8})$")
WEIGHTS_FILE, STATE_FILE = "model.safetensors", "state.pt"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)
             and (p / WEIGHTS_FILE).is_file() and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def remove_stale_temporaries(run_dir: str | Path) -> None:
    """Delete ``.tmp-*`` folders left by a process killed while writing."""
    root = checkpoint_dir(run_dir)
    if root.is_dir():
        for p in root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------- RNG
def rng_state() -> dict[str, Any]:
    """torch (CPU and CUDA), numpy-global and Python ``random`` states as tensors and plain values."""
    np_state = np.random.get_state()  # ('MT19937', uint32[624], pos, has_gauss, cached_gaussian)
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "internal": list(py_internal), "gauss": py_gauss},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of ``rng_state``."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))


# ---------------------------------------------------------------- save / load
def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(run_dir: str | Path, step: int, model: nn.Module, state: dict[str, Any], *,
                    keep_last: int) -> Path:
    """Write checkpoint ``step`` atomically (temp folder, fsync, rename); prune to ``keep_last``.

    Args:
        model: the unwrapped network (not the DDP wrapper).
        state: optimizer/scheduler state dicts, RNG states, data position...: tensors and
            plain Python containers only (loaded back with weights_only=True).
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_model(model, str(tmp / WEIGHTS_FILE))
        torch.save({**state, "step": step}, tmp / STATE_FILE)
        for f in (tmp / WEIGHTS_FILE, tmp / STATE_FILE, tmp):
            _fsync(f)
        if final.exists():  # re-saving the same step (e.g. the final step after a periodic save)
            shutil.rmtree(final)
        os.rename(tmp, final)  # atomic on POSIX
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_weights(checkpoint: str | Path, model: nn.Module) -> None:
    """Load ``model.safetensors`` of a checkpoint folder into ``model`` (strict)."""
    missing, unexpected = load_model(model, str(Path(checkpoint) / WEIGHTS_FILE), strict=True)
    if missing or unexpected:  # load_model raises in strict mode; kept as a guard
        raise RuntimeError(f"checkpoint mismatch: missing {missing}, unexpected {unexpected}")


def load_state(checkpoint: str | Path) -> dict[str, Any]:
    """The training state of a checkpoint folder (``torch.load(weights_only=True)``)."""
    return torch.load(Path(checkpoint) / STATE_FILE, map_location="cpu", weights_only=True)
