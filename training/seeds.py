"""One config trained over several seeds, summarised as a result record.

    assocmem train mqar_gdn_target --seeds 0 1 2 --result probes/experiments/results/mqar-gdn-target.json

Seed s sets ``TrainConfig.seed`` (model initialisation and batch order; the data set is
``data.seed`` and stays the same) and names the run ``<name>-s<s>``. Like a sweep, a seed
whose run has finished with the same config is not trained again, an interrupted one is
resumed, and ``--overwrite`` retrains. Per seed, from its run folder:

    accuracy, loss           the final evaluation
    accuracy@<step>          every evaluation during training (train.eval_every)
    steps_to_0.9, _0.95      the first evaluated step at or above that accuracy (None: never)
    train_minutes, tokens_per_s   training time without evaluations (machine- and load-dependent)
"""
from __future__ import annotations

import json
from pathlib import Path

from .config import TrainConfig, load_config
from .runlog import CONFIG_FILE, LOG_FILE, SUMMARY_FILE, config_differences, read_log

THRESHOLDS = (0.9, 0.95)


def seed_config(path: str | Path, overrides: list[str], seed: int) -> TrainConfig:
    """The config of ``path`` + ``overrides`` for one seed (run name suffixed ``-s<seed>``)."""
    base = load_config(path, overrides)
    return load_config(path, [*overrides, f"seed={seed}", f"name={base.name}-s{seed}"])


def run_metrics(run_dir: str | Path) -> dict[str, float | None]:
    """Per-seed metrics of a finished run folder (see the module docstring)."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    evals = [r for r in read_log(run_dir / LOG_FILE) if r.get("split") == "eval"]
    final = summary.get("eval") or {}
    metrics: dict[str, float | None] = {"accuracy": final.get("accuracy"), "loss": final.get("loss")}
    for r in evals:
        metrics[f"accuracy@{r['step']}"] = r["accuracy"]
    for t in THRESHOLDS:
        metrics[f"steps_to_{t}"] = next((float(r["step"]) for r in evals if r["accuracy"] >= t), None)
    metrics["train_minutes"] = summary["train_seconds"] / 60
    metrics["tokens_per_s"] = summary["tokens_per_s"]
    return metrics


def _status(cfg: TrainConfig) -> str:
    """'done' (finished with this config), 'started' (resumable) or 'new'; a finished run with another
    config is refused (its numbers would be recorded under this command)."""
    run_dir = Path(cfg.output_dir) / cfg.name
    if not (run_dir / CONFIG_FILE).is_file():
        return "new"
    if not (run_dir / SUMMARY_FILE).is_file():
        return "started"
    old = load_config(run_dir / CONFIG_FILE).model_dump(mode="json")
    changed = config_differences(old, cfg.model_dump(mode="json"))
    if changed:
        raise FileExistsError(f"{run_dir} finished with another config (changed: {changed}); pass --overwrite "
                              f"to retrain it, or set another output_dir")
    return "done"


def train_seeds(path: str | Path, overrides: list[str], seeds: list[int], *,
                overwrite: bool = False) -> dict[int, dict[str, float | None]]:
    """Train ``path`` once per seed (skipping finished runs); seed -> metrics."""
    from .loop import train

    configs = [seed_config(path, overrides, s) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds repeats a seed: {seeds}")
    out = {}
    for i, (seed, cfg) in enumerate(zip(seeds, configs)):
        status = "new" if overwrite else _status(cfg)
        print(f"[seed {seed}, {i + 1}/{len(seeds)}] {cfg.name}: "
              f"{ {'done': 'done, reused', 'started': 'resuming', 'new': 'training'}[status] }", flush=True)
        if status != "done":
            train(cfg, resume=status == "started", overwrite=overwrite)
        out[seed] = run_metrics(Path(cfg.output_dir) / cfg.name)
    return out


def seeds_table(per_seed: dict[int, dict[str, float | None]], metrics: tuple[str, ...] = (
        "accuracy", "steps_to_0.9", "train_minutes")) -> str:
    """Markdown: one row per seed, then mean and [min, max]."""
    from .results import summarize

    fmt = lambda x: "—" if x is None else f"{x:.4g}"  # noqa: E731
    rows = ["| seed | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    rows += [f"| {s} | " + " | ".join(fmt(m.get(k)) for k in metrics) + " |" for s, m in per_seed.items()]
    summary = summarize(per_seed)
    rows.append("| mean [min, max] | " + " | ".join(
        f"{summary[k].mean:.4g} [{summary[k].min:.4g}, {summary[k].max:.4g}] (n={summary[k].n})"
        if k in summary else "—" for k in metrics) + " |")
    return "\n".join(rows) + "\n"
