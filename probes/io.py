"""What every probe command shares: the output folder, the model argument and the common flags.

    check_out(path, overwrite)     prepare_out's refusals, touching nothing (before long work)
    prepare_out(path, overwrite)   the output folder (marked as assocmem's), refused if non-empty unless
                               overwrite, which replaces only a folder holding the marker
    load_model(ref)            a causal LM from a saved folder / run folder, a model preset name or a Hub id
    run_data(ref)              the data section of the run a model came from (None outside a run)
    settings_from_runs(...)    probe settings defaulting to the runs' data, mismatches refused
    check_length(model, n, flag)   a clear error when n tokens exceed the model's positions
    write_json(out, name, data)    <out>/<name>.json
    run_command(fn, args)      `assocmem probe NAME`: print fn's output folder (exit 0) or a user error (exit 2)
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Callable

# what a user's input raises (an existing --out, a missing file, a bad value; a ConfigError is a ValueError)
USER_ERRORS: tuple[type[Exception], ...] = (FileExistsError, FileNotFoundError, ValueError)


OUT_MARKER = ".assocmem-out"  # written into every --out folder: --overwrite replaces only a folder holding it


def overwrite_problem(out: Path) -> str | None:
    """Why ``--overwrite`` must not delete the folder ``out``, or None when assocmem wrote it (it holds
    OUT_MARKER) and it is neither the working directory nor a folder above it."""
    here = Path.cwd().resolve()
    if out.is_symlink():
        return f"{out} is a symbolic link"
    if out.resolve() == here or out.resolve() in here.parents:
        return f"{out} is the working directory or a folder above it"
    if not (out / OUT_MARKER).is_file():
        return f"{out} holds no {OUT_MARKER} marker, so assocmem did not write it"
    return None


def check_out(path: str | Path, overwrite: bool) -> bool:
    """Refuse an output folder ``prepare_out`` would refuse, touching nothing (call it before long work);
    returns whether ``prepare_out`` will delete the folder first."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a folder; give a folder path")
    if not (out.is_dir() and any(p.name != OUT_MARKER for p in out.iterdir())):
        return False
    if not overwrite:
        raise FileExistsError(f"--out {out} exists and is not empty; pass --overwrite to replace it")
    problem = overwrite_problem(out)
    if problem is not None:
        raise FileExistsError(f"--overwrite deletes only an output folder assocmem wrote; {problem}, so it is "
                              f"left as it is (choose another --out, or remove it yourself)")
    return True


def prepare_out(path: str | Path, overwrite: bool) -> Path:
    """Create the output folder and mark it as assocmem's (OUT_MARKER); refuse a non-empty one unless
    ``overwrite``, which deletes only a folder an earlier command marked (``check_out``)."""
    out = Path(path)
    if check_out(out, overwrite):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / OUT_MARKER).write_text("written by assocmem; --overwrite may replace this folder\n")
    return out


def load_model(ref: str):
    """A causal LM from a saved folder (or run folder), an assocmem model preset name or a Hugging Face
    Hub id (training/hub.py), tried in that order.

    Returns (model in eval mode, {"model": where it came from, "trained": bool}).
    """
    from assocmem.models import build_model, list_model_presets  # registers model_type "assocmem"
    from assocmem.training.hub import HubUnavailableError, is_hub_id
    from assocmem.training.model_factory import load_pretrained, pretrained_folder

    path = Path(ref)
    if path.is_dir():  # a clear error for a folder that holds no model or one that does not load
        return load_pretrained(path), {"model": str(pretrained_folder(path)), "trained": True}
    if ref in list_model_presets():
        return build_model(ref).eval(), {"model": ref, "trained": False}
    if is_hub_id(ref):
        try:
            return load_pretrained(ref), {"model": ref, "trained": True}
        except HubUnavailableError as err:
            raise HubUnavailableError(f"model {ref!r} is not a model preset ({', '.join(list_model_presets())}); "
                                      f"{err}") from None
    raise ValueError(f"model {ref!r}: not a folder, not a model preset and not a Hugging Face Hub id; presets: "
                     f"{list_model_presets()}")


def run_data(ref: str):
    """The ``data:`` section (a validated data config) of the run a model reference comes from, or None.

    ``ref`` is a run folder (it holds config.yaml), its final/, or one of its checkpoints/step_*
    folders; a save_pretrained folder outside a run, a preset or a Hub id has none.
    """
    from assocmem.training.config import load_config
    from assocmem.training.runlog import CONFIG_FILE

    path = Path(ref)
    if not path.is_dir():
        return None
    for run in (path, path.parent, path.parent.parent):
        if (run / CONFIG_FILE).is_file() and (run / "log.jsonl").is_file():
            return load_config(run / CONFIG_FILE).data
    return None


def settings_from_runs(refs: list[str], wanted: dict[str, tuple[str, object, object]], *, kind: str,
                       allow_other: bool) -> dict[str, object]:
    """Probe settings for models ``refs``, per data field ``{field: (flag, given, default)}``: the value
    given on the command line, else the one their runs were trained with (runs whose data is ``kind``),
    else the default.

    Refused: runs trained with different values (probe them in separate calls), and a given value
    that differs from the runs' unless ``allow_other`` (the error names the run, its value and the flag).
    """
    trained = {ref: data for ref in refs if (data := run_data(ref)) is not None and data.kind == kind}
    chosen = {}
    for field, (flag, value, default) in wanted.items():
        runs = {getattr(data, field) for data in trained.values()}
        if len(runs) > 1:
            raise ValueError(f"the runs {sorted(trained)} were trained with different data.{field} "
                             f"{sorted(runs)}: probe them in separate calls")
        if runs and value is not None and value not in runs and not allow_other:
            ref, run_value = next(iter(trained)), runs.pop()
            raise ValueError(f"{flag} {value} differs from data.{field}={run_value} that {ref} was trained with; leave "
                             f"{flag} out to use the run's, or pass --allow-other-settings to probe it elsewhere")
        chosen[field] = value if value is not None else (next(iter(runs)) if runs else default)
    return chosen


def trained_lengths(refs: list[str]) -> dict[str, int]:
    """{ref: data.seq_len} of the runs among ``refs`` (whatever their task): the longest input each model
    was trained on."""
    return {ref: data.seq_len for ref in refs
            if (data := run_data(ref)) is not None and isinstance(getattr(data, "seq_len", None), int)}


def within_trained_length(refs: list[str], length: int, flag: str, *, allow_other: bool) -> None:
    """Refuse ``length`` beyond the sequence length a run among ``refs`` was trained on, naming the limit,
    unless ``allow_other`` (length generalisation is a deliberate experiment, not a default)."""
    for ref, trained in trained_lengths(refs).items():
        if length > trained and not allow_other:
            raise ValueError(f"{flag} {length} is beyond the {trained} tokens {ref} was trained on (data.seq_len); "
                             f"use {flag} {trained} or less, or pass --allow-other-settings to probe beyond it")


def position_limit(model) -> int | None:
    """The longest input ``model`` has positions for, or None when nothing limits it: an assocmem
    model's learned position table (``max_positions``; RoPE, recurrence and convolutions have no
    table), a transformers config's ``max_position_embeddings`` or ``n_positions``."""
    config = model.config
    hybrid = getattr(config, "hybrid", None)
    if isinstance(hybrid, dict):
        return hybrid.get("max_positions")
    for name in ("max_position_embeddings", "n_positions"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    return None


def check_length(model, length: int, flag: str) -> None:
    """A clear error (not an IndexError deep in an embedding) when ``length`` tokens exceed the model's
    positions."""
    limit = position_limit(model)
    if limit is not None and length > limit:
        raise ValueError(f"{flag} {length} is longer than the model's {limit} positions "
                         f"({type(model).__name__}); use {flag} {limit} or less")


def write_json(out: Path, name: str, data: dict) -> Path:
    """Write ``data`` to <out>/<name>.json and return the path."""
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def run_command(fn: Callable[[argparse.Namespace], object], args: argparse.Namespace,
                errors: tuple[type[Exception], ...] = USER_ERRORS) -> int:
    """Run ``fn(args)`` for `assocmem probe <args.probe>`: print what it returns (the output folder)
    and return 0, or print a user error (one of ``errors``) as "assocmem probe NAME: why" on stderr
    and return 2, leaving nothing behind: an output folder this call created is removed (the corrected
    command then runs without --overwrite). Any other exception is a bug and propagates with its traceback."""
    made = Path(args.out) if getattr(args, "out", None) and not Path(args.out).exists() else None
    try:
        out = fn(args)
    except errors as err:
        if made is not None and made.is_dir():
            shutil.rmtree(made)
        print(f"assocmem probe {args.probe}: {err}", file=sys.stderr)
        return 2
    print(out)
    return 0
