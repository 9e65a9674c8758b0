"""Sweeps: one YAML file = a base TrainConfig plus named axes whose product is a list of runs.

    name: mqar                       # base config (all TrainConfig fields)
    ...
    sweep:
      best_over: lr                  # the results table keeps the best run over this axis
      metric: accuracy               # eval metric to optimise
      goal: max                      # max (default) or min (loss, perplexity)
      axes:
        cell:  {L256-K16: {data.seq_len: 256, data.num_kv_pairs: 16}, L512-K64: {...}}
        mixer: {attention: {model.hybrid.layers: "attn,attn"}, gdn: {model.hybrid.layers: "gdn,gdn"}}
        lr:    {lr1e-4: {optim.lr: 1.0e-4}, lr2.2e-3: {optim.lr: 2.2e-3}}

Each combination (one label per axis) is a run named ``<name>-<label>-<label>...``
with the labels' dotted values set on the base (Zoology's "experiments are
lists of configs"). ``--seeds 0 1 2`` adds a last axis ``seed`` (labels s0, s1, s2 setting
``seed``), so every combination runs once per seed and the table has a row per seed. ``assocmem train SWEEP.yaml`` trains them in order; a run
that has finished (summary.json) is skipped and one that was interrupted is
resumed exactly, so a sweep can be killed and restarted.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .config import ConfigError, TrainConfig, apply_overrides, config_from_dict, set_values
from .config_files import read_yaml, take_smoke
from .runlog import CONFIG_FILE, SUMMARY_FILE


class SweepSpec(BaseModel):
    """The ``sweep:`` section of a sweep file."""

    model_config = ConfigDict(extra="forbid")

    axes: dict[str, dict[str, dict[str, Any]]] = Field(
        description="axis name -> {label: {dotted.key: value}}; runs are the product over axes")
    best_over: str | None = Field(None, description="axis optimised over in the results table (e.g. lr)")
    metric: str = Field("accuracy", description="eval metric the table reports and optimises")
    goal: Literal["max", "min"] = Field("max", description="the best run has the largest (max: accuracy) or the "
                                        "smallest (min: loss, perplexity) metric")


def is_sweep(path: str | Path) -> bool:
    data = read_yaml(path)
    return isinstance(data, dict) and "sweep" in data


def load_sweep(path: str | Path, overrides: list[str] | None = None, seeds: list[int] | None = None, *,
               smoke: bool = False) -> tuple[SweepSpec, list[tuple[dict, TrainConfig]]]:
    """(sweep section, [(labels per axis, config)]) for every combination of labels; ``seeds``
    adds the axis ``seed`` (see the module docstring); ``smoke`` applies the file's ``smoke:`` section first
    (config_files.take_smoke: it may replace axes too, ``sweep.axes.lr: {...}``)."""
    path = Path(path)
    data = take_smoke(read_yaml(path), path, smoke)
    try:
        spec = SweepSpec.model_validate(data.pop("sweep"))
    except Exception as err:  # pydantic's message names the bad field
        raise ConfigError(f"{path}: invalid sweep section: {err}") from None
    if spec.best_over is not None and spec.best_over not in spec.axes:
        raise ConfigError(f"sweep.best_over={spec.best_over!r} is not an axis; axes: {list(spec.axes)}")
    if seeds:
        if SEED_AXIS in spec.axes:
            raise ConfigError(f"{path}: the sweep already has an axis {SEED_AXIS!r}; drop it or --seeds")
        spec.axes[SEED_AXIS] = {f"s{s}": {"seed": s} for s in seeds}
    base_name = data.pop("name", path.stem)
    runs = []
    for combo in itertools.product(*(spec.axes[a].items() for a in spec.axes)):
        labels = {axis: label for axis, (label, _) in zip(spec.axes, combo)}
        values: dict[str, Any] = {}
        for _, update in combo:
            values.update(update)
        raw = apply_overrides(set_values(data, values), overrides or [])
        raw["name"] = "-".join([base_name, *labels.values()])
        runs.append((labels, config_from_dict(raw)))
    return spec, runs


SEED_AXIS = "seed"


def seed_metrics(spec: SweepSpec, table: list[dict]) -> dict[int, dict[str, float | None]]:
    """seed -> {"<label>/<label>/...": best ``metric``} from a ``results_table`` of a sweep with seeds
    (labels of every axis except the seed and ``best_over``, in axis order)."""
    axes = [a for a in spec.axes if a not in (SEED_AXIS, spec.best_over)]
    out: dict[int, dict[str, float | None]] = {}
    for row in table:
        seed = int(row[SEED_AXIS].removeprefix("s"))
        out.setdefault(seed, {})["/".join(row[a] for a in axes)] = row[spec.metric]
    return out


def run_status(cfg: TrainConfig) -> str:
    """'done' (summary.json), 'started' (config.yaml only) or 'new'."""
    run_dir = Path(cfg.output_dir) / cfg.name
    if (run_dir / SUMMARY_FILE).is_file():
        return "done"
    return "started" if (run_dir / CONFIG_FILE).is_file() else "new"


def results_table(spec: SweepSpec, runs: list[tuple[dict, TrainConfig]]) -> list[dict]:
    """One row per combination of the other axes: best ``metric`` over ``best_over`` and its label."""
    rows: dict[tuple, dict] = {}
    for labels, cfg in runs:
        summary_path = Path(cfg.output_dir) / cfg.name / SUMMARY_FILE
        if not summary_path.is_file():
            continue
        summary = json.loads(summary_path.read_text())
        value = (summary.get("eval") or {}).get(spec.metric)
        key = tuple((a, l) for a, l in labels.items() if a != spec.best_over)
        row = rows.setdefault(key, {**dict(key), spec.metric: None, "best": None, "tokens_per_s": None})
        best = row[spec.metric]
        if value is not None and (best is None or (value > best if spec.goal == "max" else value < best)):
            row.update({spec.metric: value, "best": labels.get(spec.best_over, cfg.name),
                        "tokens_per_s": summary["tokens_per_s"], "steps": summary["steps"]})
    return list(rows.values())


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return "(no finished runs)\n"
    cols = list(rows[0])
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"
