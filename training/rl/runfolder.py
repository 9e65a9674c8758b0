"""RL run folders: the training run-folder contract (runlog.py) with an RLConfig.

    <output_dir>/<name>/config.yaml   the validated RLConfig      log.jsonl   one line per round / evaluation
    <output_dir>/<name>/curves.png    reward, pass@1, ‖g⁻‖/‖g⁺‖, KL, length      summary.json
    <output_dir>/<name>/checkpoints/  checkpoint.py (+ the reference's SHA-256)  final/  save_pretrained

A fresh run refuses an existing non-empty folder unless ``overwrite`` (which deletes only a
recognised run folder, ``runlog.run_folder_problem``); ``resume`` refuses a config that differs in
anything but ``RESUME_MUTABLE``.
"""
from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from ..runlog import check_run_folder, create_run_dir
from .config import RLConfig

RESUME_MUTABLE = {"name", "output_dir", "train.steps", "train.eval_every", "train.log_every", "train.checkpoint_every",
                  "train.keep_last", "train.progress", "train.eval_batch_size", "train.on_nonfinite"}


def check_rl_run_dir(cfg: RLConfig, *, resume: bool, overwrite: bool) -> Path:
    """The run folder of ``cfg``, checked without touching the disk (rank 0; ``runlog.check_run_folder``)."""
    return check_run_folder(cfg, resume=resume, overwrite=overwrite, mutable=RESUME_MUTABLE, saved_config=_saved_rl_config)


def _saved_rl_config(saved: Path) -> dict:
    from .config import load_rl_config

    try:
        return load_rl_config(saved).model_dump(mode="json")
    except ConfigError as err:
        raise ValueError(f"--resume: {saved} is not an RL config ({err})") from None


def create_rl_run_dir(cfg: RLConfig, run_dir: Path, *, overwrite: bool) -> None:
    """Create (or empty, with overwrite) the checked folder; write config.yaml and an empty log (rank 0;
    ``runlog.create_run_dir``)."""
    create_run_dir(cfg, run_dir, overwrite=overwrite)
