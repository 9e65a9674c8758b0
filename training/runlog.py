"""Run folders, the JSONL log and the loss/accuracy PNG.

    <output_dir>/<name>/config.yaml     the validated TrainConfig
    <output_dir>/<name>/log.jsonl       one JSON object per line: {"step", "split": "train"|"eval", ...}
    <output_dir>/<name>/curves.png      loss and accuracy against step (written at the end)
    <output_dir>/<name>/summary.json    final metrics, steps, time, tokens/s
    <output_dir>/<name>/checkpoints/    see checkpoint.py
    <output_dir>/<name>/final/          save_pretrained() of the trained model (HF folder)

A run never writes into another run's folder: starting a run whose folder
exists fails unless ``overwrite`` (which empties it) or ``resume``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .config import TrainConfig

LOG_FILE, CONFIG_FILE, CURVES_FILE, SUMMARY_FILE = "log.jsonl", "config.yaml", "curves.png", "summary.json"
# fields that may change on --resume without changing the training trajectory
RESUME_MUTABLE = {"train.progress", "train.log_every", "train.eval_every", "train.checkpoint_every",
                  "train.keep_last", "train.eval_batch_size"}


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def config_differences(old: dict, new: dict) -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    a, b = _flatten(old), _flatten(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def prepare_run_dir(cfg: TrainConfig, *, resume: bool, overwrite: bool) -> Path:
    """Create (or, for resume, check) the run folder and write config.yaml. Rank 0 only."""
    if cfg.name is None:
        raise ValueError("the config has no name; set name: (or pass a config file, whose stem is used)")
    run_dir = Path(cfg.output_dir) / cfg.name
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    if resume:
        saved = run_dir / CONFIG_FILE
        if not saved.is_file():
            raise FileNotFoundError(f"--resume: {run_dir} has no {CONFIG_FILE}; nothing to resume")
        from .config import load_config

        old = load_config(saved).model_dump(mode="json")
        changed = [k for k in config_differences(old, cfg.model_dump(mode="json")) if k not in RESUME_MUTABLE]
        if changed:
            raise ValueError(f"--resume with a different config would not continue the same run; changed: "
                             f"{changed} (only {sorted(RESUME_MUTABLE)} may change)")
    elif run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            raise FileExistsError(f"run folder {run_dir} already exists; choose another name (--set name=...), "
                                  f"continue it with --resume, or replace it with --overwrite")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(cfg.to_yaml())
    return run_dir


# ---------------------------------------------------------------- JSONL
def read_log(path: str | Path) -> list[dict]:
    """Records of a log.jsonl (a torn last line from a killed process is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class RunLog:
    """Appends JSON lines to <run>/log.jsonl (rank 0 only)."""

    def __init__(self, run_dir: str | Path, *, keep_until_step: int | None = None):
        self.path = Path(run_dir) / LOG_FILE
        if keep_until_step is not None:  # resume: drop what the killed run logged after its checkpoint
            kept = [r for r in read_log(self.path) if r.get("step", 0) <= keep_until_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# ---------------------------------------------------------------- PNG
def plot_curves(run_dir: str | Path) -> Path:
    """Train/eval loss and accuracy against step from log.jsonl -> curves.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_log(run_dir / LOG_FILE)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for split, style in (("train", "-"), ("eval", "o-")):
        rows = [r for r in records if r.get("split") == split]
        steps = [r["step"] for r in rows]
        axes[0].plot(steps, [r["loss"] for r in rows], style, label=split, markersize=3)
        axes[1].plot(steps, [r["accuracy"] for r in rows], style, label=split, markersize=3)
    axes[0].set(xlabel="step", ylabel="loss (supervised positions)", yscale="log")
    axes[1].set(xlabel="step", ylabel="accuracy (supervised positions)", ylim=(0, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    out = run_dir / CURVES_FILE
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
