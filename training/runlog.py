"""Run folders, the JSONL log and the loss/accuracy PNG.

    <output_dir>/<name>/config.yaml     the validated TrainConfig
    <output_dir>/<name>/log.jsonl       one JSON object per line: {"step", "split": "train"|"eval", ...}
    <output_dir>/<name>/curves.png      loss and accuracy against step (written at the end)
    <output_dir>/<name>/summary.json    final metrics, steps, time, tokens/s
    <output_dir>/<name>/checkpoints/    see checkpoint.py (each step also holds config.json: it loads
                                        with AutoModelForCausalLM.from_pretrained)
    <output_dir>/<name>/final/          save_pretrained() of the trained model (HF folder) and, for text
                                        data, of its tokenizer (pipeline("text-generation", model=final))

``name`` is one safe path component (``config.RUN_NAME_RULE``), so a run folder is always a
direct child of ``output_dir``. A run never writes into another run's folder: starting a run
whose folder exists fails unless ``resume``, or ``overwrite``, which deletes the folder only if
it is a recognised run folder (``run_folder_problem``: it holds our config.yaml and log.jsonl)
and never follows a symlink. The folder is checked first (``check_run_dir``) and created only
once the data and model are built (``create_run_dir``): a run that fails before leaves nothing.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Callable


from .config import TrainConfig
from .config_files import ConfigError, read_yaml

LOG_FILE, CONFIG_FILE, CURVES_FILE, SUMMARY_FILE = "log.jsonl", "config.yaml", "curves.png", "summary.json"
# fields that may change on --resume without changing the steps already taken: logging and
# checkpoint cadence, where the folder lives (a moved run), the length of the run (extending it:
# optim.py documents the schedule rule), and what to do at a non-finite loss
RESUME_MUTABLE = {"train.progress", "train.log_to", "train.log_every", "train.eval_every", "train.checkpoint_every",
                  "train.keep_last", "train.eval_batch_size", "train.steps", "train.epochs", "train.on_nonfinite",
                  "name", "output_dir"}


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


def run_folder_problem(path: Path) -> str | None:
    """Why ``path`` is not a run folder that ``--overwrite`` may delete, or None if it is one.

    A run folder is a real directory (not a symlink) holding a config.yaml that reads as a
    TrainConfig mapping (model, data and train sections) and a log.jsonl.
    """
    if path.is_symlink():
        return f"{path} is a symlink"
    if not path.is_dir():
        return f"{path} is not a directory"
    config, log = path / CONFIG_FILE, path / LOG_FILE
    if not config.is_file() or not log.is_file():
        return f"{path} does not hold both {CONFIG_FILE} and {LOG_FILE}"
    if {p.name for p in path.iterdir()} == {CONFIG_FILE, LOG_FILE} and not config.stat().st_size \
            and not log.stat().st_size:
        return None  # both empty and nothing else: a start stopped while writing them (a full disk)
    try:
        data = read_yaml(config)
    except ConfigError as err:
        return f"{config} is not a readable YAML config ({err})"
    if not isinstance(data, dict) or not {"model", "data", "train"} <= set(data):
        return f"{config} is not a TrainConfig (no model, data and train sections)"
    return None


def _as_trained(old: dict, saved: Path) -> dict:
    """A saved config as its run was trained: packed text saved before ``data.documents`` existed
    was read as one sequence per block (``joined``), whatever today's default says."""
    raw = read_yaml(saved).get("data") or {}
    if old["data"].get("kind") == "files" and raw.get("prompt_field") is None and "documents" not in raw:
        old["data"]["documents"] = "joined"
    return old


def check_run_dir(cfg: TrainConfig, *, resume: bool, overwrite: bool) -> Path:
    """The run folder of ``cfg``, checked without touching the disk. Rank 0 only (``check_run_folder``
    with the training config's RESUME_MUTABLE)."""
    from .config import load_config

    return check_run_folder(cfg, resume=resume, overwrite=overwrite, mutable=RESUME_MUTABLE,
                            saved_config=lambda saved: _as_trained(load_config(saved).model_dump(mode="json"), saved))


def check_run_folder(cfg, *, resume: bool, overwrite: bool, mutable: set[str],
                     saved_config: Callable[[Path], dict]) -> Path:
    """The run folder ``cfg.output_dir / cfg.name`` of any run config (training, rl), checked without
    touching the disk. Rank 0 only.

    Fresh run: the folder must be absent or empty, or (overwrite) a recognised run folder.
    Resume: the folder's config.yaml, read by ``saved_config`` (a dict as ``cfg.model_dump(mode="json")``),
    may differ from ``cfg`` only in the dotted fields of ``mutable``.
    """
    if cfg.name is None:
        raise ValueError("the config has no name; set name: (or pass a config file, whose stem is used)")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    parent = Path(cfg.output_dir)
    if parent.exists() and not parent.is_dir():
        raise NotADirectoryError(f"output_dir {parent} is a file, not a folder; set output_dir to a folder")
    run_dir = parent / cfg.name
    if resume:
        saved = run_dir / CONFIG_FILE
        if not saved.is_file():
            raise FileNotFoundError(f"--resume: {run_dir} has no {CONFIG_FILE}; nothing to resume")
        changed = [k for k in config_differences(saved_config(saved), cfg.model_dump(mode="json")) if k not in mutable]
        if changed:
            raise ValueError(f"--resume with a different config would not continue the same run; changed: "
                             f"{changed} (only {sorted(mutable)} may change)")
    elif run_dir.is_symlink() or (run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir()))):
        if not overwrite:
            raise FileExistsError(f"run folder {run_dir} already exists; choose another name (--set name=...), "
                                  f"continue it with --resume, or replace it with --overwrite")
        problem = run_folder_problem(run_dir)
        if problem is not None:
            raise FileExistsError(f"--overwrite deletes only a run folder; {problem}, so {run_dir} is left as it "
                                  f"is (choose another name with --set name=..., or remove it yourself)")
    return run_dir


def create_run_dir(cfg: TrainConfig, run_dir: Path, *, overwrite: bool) -> None:
    """Create (or empty, with overwrite) the checked run folder; write config.yaml and an empty log. Rank 0 only.

    On resume the folder exists: only config.yaml is rewritten (it records the mutable fields' new values).
    """
    if overwrite and run_dir.is_dir() and run_folder_problem(run_dir) is None:
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    replace_file(run_dir / CONFIG_FILE, cfg.to_yaml())  # never a half-written config.yaml (a full disk)
    (run_dir / LOG_FILE).touch()


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file beside it, fsynced, renamed over it. A kill or a
    full disk leaves the old file (or none), never a truncated one; a symbolic link at ``path`` is replaced by
    the file, its target left as it is."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    """Appends JSON lines to <run>/log.jsonl (rank 0 only), and passes each record to ``sinks``
    (log_sinks.py: TensorBoard, W&B)."""

    def __init__(self, run_dir: str | Path, *, keep_until_step: int | None = None, sinks: list | None = None):
        self.sinks = list(sinks or [])
        self.path = Path(run_dir) / LOG_FILE
        if keep_until_step is not None or self.path.is_symlink():
            # resume: drop what the killed run logged after its checkpoint (a linked log is copied, its target kept)
            kept = [r for r in read_log(self.path)
                    if keep_until_step is None or r.get("step", 0) <= keep_until_step]
            replace_file(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for sink in self.sinks:
            sink.write(record)

    def close(self) -> None:
        self._file.close()
        for sink in self.sinks:
            sink.close()


# ---------------------------------------------------------------- PNG
def plot_curves(run_dir: str | Path) -> Path:
    """Train/eval loss (log axis, at least three labelled ticks over the run's range) and accuracy
    against step from log.jsonl -> curves.png."""
    from .figures import ACCURACY_LIMITS, finish, integer_axis, log_axis, plt, save_figure

    run_dir = Path(run_dir)
    records = read_log(run_dir / LOG_FILE)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for split, marker in (("train", None), ("eval", "o")):
        rows = [r for r in records if r.get("split") == split and "loss" in r]
        steps = [r["step"] for r in rows]
        marker = "o" if len(rows) == 1 else marker  # a lone point is drawn, not an invisible line
        axes[0].plot(steps, [r["loss"] for r in rows], marker=marker, label=split, markersize=3)
        axes[1].plot(steps, [r.get("accuracy", math.nan) for r in rows], marker=marker, label=split,
                     markersize=3, clip_on=False)
    losses = [r["loss"] for r in records if isinstance(r.get("loss"), (int, float)) and r["loss"] > 0]
    if losses:
        log_axis(axes[0].yaxis)
    axes[0].set(xlabel="step (optimizer updates)", ylabel="loss (nats per supervised token)")
    axes[1].set(xlabel="step (optimizer updates)", ylabel="accuracy (fraction of supervised tokens)",
                ylim=ACCURACY_LIMITS)
    for ax in axes:
        integer_axis(ax.xaxis)
        ax.grid(alpha=0.3)
        ax.grid(alpha=0.12, which="minor")
    finish(fig, run_dir.name)
    return save_figure(fig, run_dir / CURVES_FILE)
