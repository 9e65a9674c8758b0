"""Checkpoints: safetensors weights + a weights_only-loadable training state, written atomically
and verified by checksum.

Layout of a run folder:

    <run>/checkpoints/step_00000120/model.safetensors   weights (safetensors.torch.save_model;
                                                         tied tensors stored once)
    <run>/checkpoints/step_00000120/state.pt            optimizer, scheduler, RNG states of every
                                                         rank, step, data position and the gradient
                                                         transforms' state (torch.save of
                                                         tensors and plain Python values only, so
                                                         torch.load(weights_only=True) reads it)
    <run>/checkpoints/step_00000120/config.json         the model's transformers config (HF models):
                                                         the folder loads with from_pretrained
    <run>/checkpoints/step_00000120/checksums.json      SHA-256 and size of the files above

Writing (``save_checkpoint``):

  1. the files go into ``checkpoints/.tmp-step_...`` and are fsynced;
  2. they are read back and hashed, and ``checksums.json`` is written last (and fsynced): a
     temporary folder holding a manifest that matches its files is complete;
  3. the folder is renamed to its final name (atomic on POSIX). Re-saving a step that exists
     renames the old folder aside (``.old-step_...``) first, renames the new one in, then deletes
     the old one: a kill at any moment leaves a complete checkpoint under one of the two names;
  4. older checkpoints beyond ``keep_last`` are deleted, never the newest verified one: each is first renamed
     to ``.del-step_...`` (atomic), then removed, so a kill while deleting leaves no half-deleted ``step_*``.

Reading: ``verify_checkpoint`` recomputes the checksums and checks that every weight is
finite; ``latest_valid_checkpoint`` walks from the newest checkpoint back to the first one that
verifies, with a warning naming each damaged file. ``recover_interrupted_writes`` (at resume)
finishes what a killed writer left: a complete ``.tmp-*`` becomes the checkpoint it was meant
to be, an ``.old-*`` whose replacement never arrived is renamed back, the rest (``.del-*`` included) is
removed, and so is an empty ``step_*`` folder.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn

_STEP_DIR = re.compile(r"^step_(\d{8})$")
_ASIDE = re.compile(r"^\.(tmp|old|del)-(step_\d{8})-\d+$")  # folders of an interrupted write or prune
WEIGHTS_FILE, STATE_FILE, MANIFEST_FILE = "model.safetensors", "state.pt", "checksums.json"
CONFIG_FILE = "config.json"  # optional (absent for a model without a transformers config, or an older checkpoint)
DAMAGED_PREFIX = "damaged-"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (the message names the file and what is wrong with it)."""


class CheckpointWarning(UserWarning):
    """A damaged checkpoint was skipped in favour of an older one."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def step_of(checkpoint: str | Path) -> int:
    """The step a checkpoint folder ``step_XXXXXXXX`` holds."""
    match = _STEP_DIR.match(Path(checkpoint).name)
    if match is None:
        raise CheckpointError(f"{checkpoint} is not a checkpoint folder (expected a name like step_00000120)")
    return int(match.group(1))


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint folders of a run holding both files, oldest first (not yet verified)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)
             and (p / WEIGHTS_FILE).is_file() and (p / STATE_FILE).is_file()]
    return sorted(found, key=step_of)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint holding both files, or None (``latest_valid_checkpoint`` also verifies it)."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


# ---------------------------------------------------------------- checksums
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """{file: {"sha256", "bytes"}} of the checkpoint files (the two required ones and config.json
    when present) as they are on disk."""
    return {name: {"sha256": _sha256(folder / name), "bytes": (folder / name).stat().st_size}
            for name in (WEIGHTS_FILE, STATE_FILE, CONFIG_FILE) if (folder / name).is_file()}


def _non_finite_weight(path: Path) -> str | None:
    """The name of the first tensor of a safetensors file holding NaN or ±inf, or None."""
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return name
    return None


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """What is wrong with a checkpoint folder, or None when it verifies.

    Checks, in order: both files and ``checksums.json`` exist, each file the manifest names (the
    two, and config.json when it was written) exists and its size and SHA-256 match, every
    floating tensor of the weights is finite, and the state loads with ``weights_only`` (checksums
    resealed over a state that pickles code do not make it loadable).
    """
    folder = Path(checkpoint)
    for name in (WEIGHTS_FILE, STATE_FILE):
        if not (folder / name).is_file():
            return f"{folder / name} is missing"
    if not (folder / MANIFEST_FILE).is_file():
        return (f"{folder / MANIFEST_FILE} is missing (the checkpoint was written without checksums, by an "
                f"older assocmem, or its write was interrupted)")
    try:
        expected = json.loads((folder / MANIFEST_FILE).read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
        return f"{folder / MANIFEST_FILE} is unreadable ({type(err).__name__}: {err})"
    listed = (CONFIG_FILE,) if isinstance(expected, dict) and CONFIG_FILE in expected else ()
    for name in (WEIGHTS_FILE, STATE_FILE, *listed):
        want = expected.get(name) if isinstance(expected, dict) else None
        if not isinstance(want, dict):
            return f"{folder / MANIFEST_FILE} has no checksum for {name}"
        if not (folder / name).is_file():
            return f"{folder / name} is missing"
        size = (folder / name).stat().st_size
        if size != want.get("bytes"):
            return f"{folder / name} has {size} bytes, its checksum was taken over {want.get('bytes')}"
        found = _sha256(folder / name)
        if found != want.get("sha256"):
            return f"{folder / name} does not match its SHA-256 (expected {want.get('sha256')}, found {found})"
    try:
        bad = _non_finite_weight(folder / WEIGHTS_FILE)
    except Exception as err:  # safetensors raises its own error types on a malformed header
        return f"{folder / WEIGHTS_FILE} cannot be read ({type(err).__name__}: {err})"
    if bad is not None:
        return f"{folder / WEIGHTS_FILE} holds non-finite values in {bad}"
    try:
        load_state(folder)
    except Exception as err:  # weights_only refuses pickled code with an UnpicklingError; a torn zip, RuntimeError
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        why = next((line for line in lines if "GLOBAL" in line.upper()), lines[0] if lines else "")
        return f"{folder / STATE_FILE} does not load as plain tensors and values ({type(err).__name__}: {why})"
    return None


def verify_checkpoint(checkpoint: str | Path) -> Path:
    """Raise CheckpointError naming the bad file unless the checkpoint verifies; return its path."""
    problem = checkpoint_problem(checkpoint)
    if problem is not None:
        raise CheckpointError(f"checkpoint {checkpoint} is damaged: {problem}")
    return Path(checkpoint)


def latest_valid_checkpoint(run_dir: str | Path, *, set_aside: bool = False) -> Path | None:
    """The newest checkpoint that verifies, or None when the run has no checkpoint at all.

    The damaged checkpoints met on the way are reported in one CheckpointWarning naming each bad
    file and the checkpoint used instead; with ``set_aside`` each is also renamed to ``damaged-step_...`` (kept for inspection,
    never listed, loaded or deleted again; a step damaged a second time becomes ``damaged-step_...-2``, ...). Raises CheckpointError, renaming nothing, when
    checkpoints exist but none verifies (starting over silently would lose the run).
    """
    found = list_checkpoints(run_dir)
    damaged: list[tuple[Path, str]] = []
    for path in reversed(found):
        problem = checkpoint_problem(path)
        if problem is None:
            break
        damaged.append((path, problem))
    else:
        if damaged:
            raise CheckpointError(f"no checkpoint of {run_dir} verifies (all are kept): "
                                  + "; ".join(problem for _, problem in damaged))
        return None
    problems = []
    for bad, problem in damaged:
        if set_aside:
            kept = _unused_name(bad.with_name(DAMAGED_PREFIX + bad.name))
            os.rename(bad, kept)
            problem += f" (moved to {kept})"
        problems.append(problem)
    if problems:
        warnings.warn(f"damaged checkpoint(s) skipped: {'; '.join(problems)}; using {path}", CheckpointWarning,
                      stacklevel=2)
    return path


def _unused_name(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... : the first name no file or folder has."""
    candidate, n = path, 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def recover_interrupted_writes(run_dir: str | Path) -> None:
    """Finish what a writer killed in ``save_checkpoint`` left behind (see the module docstring).

    A ``.tmp-step_X-<pid>`` whose manifest matches its files is renamed to ``step_X`` when that is
    absent; an ``.old-step_X-<pid>`` is renamed back to ``step_X`` when that is absent; every other
    ``.tmp-*`` / ``.old-*`` folder and every ``.del-*`` folder (a prune killed midway) is deleted, and so is an
    empty ``step_*`` folder (left by an older prune killed midway).
    """
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        if _STEP_DIR.match(p.name) and p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
            p.rmdir()
            continue
        match = _ASIDE.match(p.name)
        if match is None or not p.is_dir():
            continue
        kind, final = match.group(1), root / match.group(2)
        usable = kind == "old" or kind == "tmp" and checkpoint_problem(p) is None
        if usable and not final.exists():
            os.rename(p, final)
        else:
            shutil.rmtree(p, ignore_errors=True)
    _fsync(root)


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


def seal_checkpoint(folder: str | Path) -> None:
    """Write ``checksums.json`` for the files of ``folder`` as they are on disk now (fsynced).

    ``save_checkpoint`` calls it; call it yourself after editing a checkpoint on purpose (the
    edited files are what the checksums will then vouch for).
    """
    folder = Path(folder)
    for name in (WEIGHTS_FILE, STATE_FILE, CONFIG_FILE):
        if (folder / name).is_file():
            _fsync(folder / name)
    manifest = {"format": 1, "files": _manifest(folder)}  # hashed as read back from disk
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))
    _fsync(folder / MANIFEST_FILE)
    _fsync(folder)


def _write_config(folder: Path, model: nn.Module) -> None:
    """config.json of a transformers model (as ``save_pretrained`` writes it, ``architectures``
    included), so the checkpoint folder loads with ``AutoModelForCausalLM.from_pretrained``."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_json_file"):
        return
    if not getattr(config, "architectures", None):
        config.architectures = [type(model).__name__]
    config.to_json_file(str(folder / CONFIG_FILE))


def _write_files(folder: Path, step: int, model: nn.Module, state: dict[str, Any]) -> None:
    """Steps 1-2 of the module docstring: the files, fsynced, then their manifest."""
    save_model(model, str(folder / WEIGHTS_FILE))
    torch.save({**state, "step": step}, folder / STATE_FILE)
    _write_config(folder, model)
    seal_checkpoint(folder)


def _rename_in(tmp: Path, final: Path) -> None:
    """Step 3: rename ``tmp`` to ``final``; an existing ``final`` is set aside first, deleted after."""
    aside = None
    if final.exists():
        aside = final.with_name(f".old-{final.name}-{os.getpid()}")
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(final, aside)
    os.rename(tmp, final)  # atomic on POSIX
    _fsync(final.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _prune(run_dir: str | Path, keep_last: int, newest: Path) -> None:
    """Step 4: delete checkpoints older than the newest ``keep_last``; ``newest`` (verified) stays."""
    for old in list_checkpoints(run_dir)[:-keep_last]:
        if old != newest:
            doomed = old.with_name(f".del-{old.name}-{os.getpid()}")
            os.rename(old, doomed)
            shutil.rmtree(doomed, ignore_errors=True)


def save_checkpoint(run_dir: str | Path, step: int, model: nn.Module, state: dict[str, Any], *,
                    keep_last: int) -> Path:
    """Write checkpoint ``step`` atomically with its checksums; prune to ``keep_last`` (module docstring).

    Args:
        model: the unwrapped network (not the DDP wrapper).
        state: optimizer/scheduler state dicts, RNG states, data position...: tensors and
            plain Python containers only (loaded back with weights_only=True).
    Raises CheckpointError (nothing written) if a weight of ``model`` is NaN or ±inf.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    for name, t in model.state_dict().items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"refusing to save checkpoint step {step}: weight {name} holds NaN or inf "
                                  f"(the previous checkpoints are kept)")
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        _write_files(tmp, step, model, state)
        _rename_in(tmp, final)
    except (OSError, RuntimeError) as err:  # a full disk: ENOSPC, or torch's "unexpected pos" from its zip writer
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(_write_failure(root, step, err)) from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(run_dir, keep_last, final)
    return final


def _write_failure(root: Path, step: int, err: Exception) -> str:
    """What a failed checkpoint write says: the error, the free disk space, what was kept."""
    free = shutil.disk_usage(root).free if root.exists() else None
    space = (f"{free / 2**20:.1f} MiB free on the disk of {root}" if free is not None else f"{root} is gone")
    full = getattr(err, "errno", None) == errno.ENOSPC or "unexpected pos" in str(err) or (free or 0) < 2**26
    return (f"writing checkpoint step {step} failed ({type(err).__name__}: {err}); {space}"
            + ("; the disk is (nearly) full: free space and resume with --resume" if full else "")
            + f". Nothing of step {step} was kept; the previous checkpoints are as they were")


def load_weights(checkpoint: str | Path, model: nn.Module) -> None:
    """Load ``model.safetensors`` of a checkpoint folder into ``model`` (strict)."""
    missing, unexpected = load_model(model, str(Path(checkpoint) / WEIGHTS_FILE), strict=True)
    if missing or unexpected:  # load_model raises in strict mode; kept as a guard
        raise RuntimeError(f"checkpoint mismatch: missing {missing}, unexpected {unexpected}")


def load_state(checkpoint: str | Path) -> dict[str, Any]:
    """The training state of a checkpoint folder (``torch.load(weights_only=True)``)."""
    return torch.load(Path(checkpoint) / STATE_FILE, map_location="cpu", weights_only=True)
