"""What every probe command shares: the output folder, the model argument and the common flags.

    add_common_flags(parser)   --out (required), --overwrite, --seed
    prepare_out(path, overwrite)   the output folder, refused if non-empty unless overwrite
    load_model(ref)            a causal LM from a saved folder / run folder, a model preset name or a Hub id
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


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """--out, --overwrite and --seed, the flags of every probe command."""
    p.add_argument("--out", required=True, help="output folder (refused if non-empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing non-empty output folder")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")


def prepare_out(path: str | Path, overwrite: bool) -> Path:
    """Create the output folder; refuse a non-empty one unless ``overwrite``."""
    out = Path(path)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"--out {out} exists and is not empty; pass --overwrite to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def load_model(ref: str):
    """A causal LM from a saved folder (or run folder), an assocmem model preset name or a Hugging Face
    Hub id (training/hub.py), tried in that order.

    Returns (model in eval mode, {"model": where it came from, "trained": bool}).
    """
    from assocmem.models import build_model, list_model_presets  # registers model_type "assocmem"
    from assocmem.training.hub import is_hub_id
    from assocmem.training.model_factory import load_pretrained, pretrained_folder

    path = Path(ref)
    if path.is_dir():  # a clear error for a folder that holds no model or one that does not load
        return load_pretrained(path), {"model": str(pretrained_folder(path)), "trained": True}
    if ref in list_model_presets():
        return build_model(ref).eval(), {"model": ref, "trained": False}
    if is_hub_id(ref):
        return load_pretrained(ref), {"model": ref, "trained": True}
    raise ValueError(f"model {ref!r}: not a folder, not a model preset and not a Hugging Face Hub id; presets: "
                     f"{list_model_presets()}")


def write_json(out: Path, name: str, data: dict) -> Path:
    """Write ``data`` to <out>/<name>.json and return the path."""
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def run_command(fn: Callable[[argparse.Namespace], object], args: argparse.Namespace,
                errors: tuple[type[Exception], ...] = USER_ERRORS) -> int:
    """Run ``fn(args)`` for `assocmem probe <args.probe>`: print what it returns (the output folder)
    and return 0, or print a user error (one of ``errors``) as "assocmem probe NAME: why" on stderr
    and return 2. Any other exception is a bug and propagates with its traceback."""
    try:
        out = fn(args)
    except errors as err:
        print(f"assocmem probe {args.probe}: {err}", file=sys.stderr)
        return 2
    print(out)
    return 0
