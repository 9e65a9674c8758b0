"""Result records: the JSON every reproducible experiment writes.

A number quoted in the README is a *result*: one CLI command run over several seeds. The
command writes one JSON record, and the copy the README quotes is stored in
``probes/experiments/results/<name>.json`` (registered in ``probes/experiments/registry.py`` so that
``assocmem reproduce NAME`` can rerun it and compare). A record holds:

    {"format": 1,
     "name": "mqar-gdn-target",
     "description": "2-layer GDN, d=128, MQAR L=256 K=16 ...",
     "command": "assocmem train mqar_gdn_target --seeds 0 1 2 --result probes/experiments/results/mqar-gdn-target.json",
     "seeds": [0, 1, 2],
     "versions": {"python": "3.11.2", "torch": "2.13.0+cpu", "transformers": "5.24.0",
                  "assocmem_commit": "227aafa…", "assocmem_dirty": false, "lock_sha256": "…",
                  "machine": "AMD EPYC, 2 cores"},
     "created": "2026-11-25T10:00:00+00:00",
     "per_seed": {"0": {"accuracy": 0.98, "accuracy@1000": 0.95}, "1": {...}, "2": {...}},
     "summary": {"accuracy": {"mean": 0.975, "min": 0.97, "max": 0.98, "n": 3}, ...},
     "extra": {...}}                    # anything else worth keeping (curves, minutes per seed)

Per-seed metrics are floats (``null`` where a seed has no value, e.g. a threshold never
reached); the summary is over the seeds that have one. The versions are those of the process,
read when the command starts (``current_versions()``). Writing a record never replaces an
existing file unless asked (``overwrite=True``).

Adopting the format in a new experiment (a command that runs seeds and knows its metrics):

    from assocmem.training.results import command_line, current_versions, write_result

    current_versions()                       # when the command starts: the code this process runs
    per_seed = {seed: {"accuracy": acc, "loss": loss} for seed, (acc, loss) in runs.items()}
    write_result(args.result, name="my-experiment", command=command_line("assocmem"),
                 seeds=list(runs), per_seed=per_seed, description="what was run", overwrite=args.overwrite)
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT = 1
REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout (editable install) holding constraints.txt
LOCK_FILE = "constraints.txt"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Versions(_Strict):
    """What the numbers were computed with."""

    python: str = Field(description="Python version")
    torch: str = Field(description="torch.__version__")
    transformers: str | None = Field(description="transformers.__version__ (None if not installed)")
    assocmem_commit: str | None = Field(description="git commit of the checkout (None outside a git checkout)")
    assocmem_dirty: bool | None = Field(description="tracked files differ from that commit (None: unknown)")
    lock_sha256: str | None = Field(description="sha256 of constraints.txt, the locked environment (None: absent)")
    machine: str = Field(description="CPU model and core count (rounding differs between instruction sets)")


class MetricSummary(_Strict):
    """One metric over the seeds that have a value."""

    mean: float = Field(description="mean over seeds")
    min: float = Field(description="smallest seed value")
    max: float = Field(description="largest seed value")
    n: int = Field(ge=1, description="seeds with a value")

    @property
    def range(self) -> float:
        return self.max - self.min


class ResultRecord(_Strict):
    """One stored result (see the module docstring for an example)."""

    format: Literal[1] = Field(FORMAT, description="version of this record format")
    name: str = Field(min_length=1, description="result name, e.g. mqar-gdn-target (probes/experiments/results/<name>.json)")
    description: str = Field("", description="what was run, in one or two sentences")
    command: str = Field(min_length=1, description="the command line that wrote this record")
    seeds: list[int] = Field(min_length=1, description="seeds run, in order")
    versions: Versions
    created: str = Field(description="UTC time the record was written (ISO 8601)")
    per_seed: dict[str, dict[str, float | None]] = Field(description="str(seed) -> metric -> value")
    summary: dict[str, MetricSummary] = Field(description="metric -> mean/min/max over seeds")
    extra: dict[str, Any] = Field(default_factory=dict, description="anything else kept with the result")

    def values(self, metric: str) -> dict[int, float | None]:
        """seed -> value of ``metric`` (None where that seed has none)."""
        return {int(s): m.get(metric) for s, m in self.per_seed.items()}


# ---------------------------------------------------------------- versions
def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


@functools.lru_cache(maxsize=None)
def current_versions() -> Versions:
    """The versions of this process: python, torch, transformers, the checkout's commit and lock.

    Read once per process and kept: a command calls it when it starts, so that a commit made
    while it runs is not recorded as the code it ran (a process runs the code it imported)."""
    import torch

    try:
        import transformers

        tf_version: str | None = transformers.__version__
    except ImportError:
        tf_version = None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    lock = REPO_ROOT / LOCK_FILE
    return Versions(python=platform.python_version(), torch=torch.__version__, transformers=tf_version,
                    assocmem_commit=commit, assocmem_dirty=None if status is None else bool(status),
                    lock_sha256=hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None,
                    machine=_machine())


def command_line(program: str = "assocmem", argv: list[str] | None = None) -> str:
    """The command of this process as a user would type it: ``program`` + the arguments."""
    return shlex.join([program, *(sys.argv[1:] if argv is None else argv)])


# ---------------------------------------------------------------- records
def summarize(per_seed: dict[int, dict[str, float | None]]) -> dict[str, MetricSummary]:
    """metric -> mean/min/max/n over the seeds that have a (finite) value."""
    metrics = dict.fromkeys(m for values in per_seed.values() for m in values)
    out = {}
    for metric in metrics:
        xs = [v[metric] for v in per_seed.values() if v.get(metric) is not None]
        bad = [x for x in xs if not math.isfinite(x)]
        if bad:
            raise ValueError(f"metric {metric!r}: non-finite values {bad}; store None for a missing value")
        if xs:
            out[metric] = MetricSummary(mean=sum(xs) / len(xs), min=min(xs), max=max(xs), n=len(xs))
    return out


def make_record(*, name: str, command: str, seeds: list[int], per_seed: dict[int, dict[str, float | None]],
                description: str = "", extra: dict[str, Any] | None = None) -> ResultRecord:
    """A record of ``per_seed`` (seed -> metric -> value) with its summary and the current versions."""
    if sorted(per_seed) != sorted(seeds):
        raise ValueError(f"per_seed has seeds {sorted(per_seed)}, but seeds={sorted(seeds)}: give every seed "
                         f"run (and only those)")
    clean = {str(s): {k: None if v is None else float(v) for k, v in per_seed[s].items()} for s in seeds}
    return ResultRecord(name=name, description=description, command=command, seeds=list(seeds),
                        versions=current_versions(),
                        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        per_seed=clean, summary=summarize(per_seed), extra=extra or {})


def save_record(record: ResultRecord, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``record`` as JSON (atomic); refuses an existing file unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; a stored result is not replaced silently (pass --overwrite, or "
                              f"choose another path)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(record.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)
    return path


def write_result(path: str | Path, *, name: str, command: str, seeds: list[int],
                 per_seed: dict[int, dict[str, float | None]], description: str = "",
                 extra: dict[str, Any] | None = None, overwrite: bool = False) -> ResultRecord:
    """``make_record`` + ``save_record``: the one call an experiment needs (see the module docstring)."""
    record = make_record(name=name, command=command, seeds=seeds, per_seed=per_seed, description=description,
                         extra=extra)
    save_record(record, path, overwrite=overwrite)
    return record


def read_result(path: str | Path) -> ResultRecord:
    """Load and validate a stored record (a clear error names the file and the bad field)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no result record at {path}")
    try:
        return ResultRecord.model_validate(json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path} is not a valid result record: {err}") from None
