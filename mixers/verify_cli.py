"""`assocmem verify [NAME ...] [--json PATH]`: check every preset (or the named
presets / spec files) against its derivation; exit 1 on any mismatch."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .presets import get_preset, list_presets
from .spec import MixerSpec
from .verify import PairResult, verify


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="compare derived, hand-written, lowered and external implementations",
                       description=__doc__)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"preset names or spec YAML/JSON files (default: all presets: {', '.join(list_presets())})")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as a JSON list")
    p.add_argument("--seq-len", type=int, default=70, help="sequence length T of the random inputs (default 70)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=main)


def _resolve(name: str) -> MixerSpec:
    if name.endswith((".yaml", ".yml", ".json")):
        if not Path(name).exists():
            raise SystemExit(f"verify: spec file {name!r} does not exist")
        return MixerSpec.from_yaml(Path(name))
    try:
        return get_preset(name)
    except KeyError as exc:
        raise SystemExit(f"verify: {exc.args[0]}") from None


def print_table(results: list[PairResult], out=None) -> None:
    out = out or sys.stdout
    w = max(len(r.pair) for r in results)
    print(f"{'preset':22s}  {'pair':{w}s}  {'max abs error':>13s}  {'tol':>7s}  result", file=out)
    for r in results:
        verdict = ("pass" if r.passed else "FAIL") + (" (differs as expected)" if r.expect == "differ" and r.passed else "")
        print(f"{r.preset:22s}  {r.pair:{w}s}  {r.max_abs_error:13.2e}  {r.tolerance:7.0e}  {verdict}", file=out)


def main(args: argparse.Namespace) -> int:
    specs = [_resolve(n) for n in (args.names or list_presets())]
    results: list[PairResult] = []
    for spec in specs:
        results += verify(spec, T=args.seq_len, seed=args.seed)
    print_table(results)
    failed = [r for r in results if not r.passed]
    print(f"\n{len(results) - len(failed)} of {len(results)} pairs pass")
    if args.json:
        if args.json.exists():
            print(f"(overwriting {args.json}: verify results are regenerated output)")
        args.json.write_text(json.dumps([r.as_json() for r in results], indent=2, default=float))
    return 1 if failed else 0
