"""`assocmem bench mixers|decode`: benchmark scripts that print a table and write JSON.

Timings are ratios measured in one run on a noisy machine; nothing here is asserted in tests.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks (mixer forms, decode latency, training throughput)", description=__doc__)
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    kinds.required = True
    m = kinds.add_parser("mixers", help="forms of each mixer family vs derived, recurrent and external peers")
    m.add_argument("--json", type=Path, metavar="PATH", help="write the rows as a JSON list")
    m.add_argument("--markdown", type=Path, metavar="PATH", help="write the rows as a markdown table")
    m.add_argument("--families", nargs="+", default=None, metavar="FAMILY",
                   help="preset families (default: gated_deltanet mamba2 gla sca softmax)")
    m.add_argument("--seq-lens", nargs="+", type=int, default=[512, 2048, 8192], metavar="T")
    m.add_argument("--modes", nargs="+", choices=["fwd", "fwdbwd"], default=["fwd", "fwdbwd"])
    m.add_argument("--impls", nargs="+", default=[], metavar="TEXT",
                   help="only implementations whose name contains one of these (e.g. chunk transformers)")
    m.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads for every implementation (default: torch's, all cores)")
    m.add_argument("--processes", type=int, default=1, metavar="N",
                   help="run the bench in N fresh processes, one after another, and report per row the "
                        "median ms over them with the range of each ratio (the allocator's state, which "
                        "shifts timings by up to 2x, differs between processes)")
    m.set_defaults(func=_mixers)
    from assocmem.models.bench import register_decode

    from .bench_train import register_train

    register_decode(kinds)
    register_train(kinds)


def _mixers(args: argparse.Namespace) -> int:
    import torch

    from assocmem.mixers.bench import FAMILIES, markdown_table, median_rows, ratio_table, run_bench

    if args.threads is not None:
        if args.threads < 1:
            print(f"assocmem bench mixers: --threads must be >= 1, got {args.threads}", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
    if args.processes < 1:
        print(f"assocmem bench mixers: --processes must be >= 1, got {args.processes}", file=sys.stderr)
        return 2
    runs = None
    if args.processes == 1:
        rows = run_bench(tuple(args.families or FAMILIES), tuple(args.seq_lens), tuple(args.modes),
                         only=tuple(args.impls))
    else:
        runs = _in_processes(args)
        rows = median_rows(runs)
    print("\nratios (same run)" + (f", median over {args.processes} processes:" if runs else ":"))
    for line in ratio_table(rows, runs):
        print("  " + line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.write_text(markdown_table(rows) + "\n")
        print(f"wrote {args.markdown}")
    return 0


def _in_processes(args: argparse.Namespace) -> list[list[dict]]:
    """The rows of ``args.processes`` runs of this bench, each in a fresh python process."""
    import subprocess
    import tempfile

    argv = ["bench", "mixers", "--seq-lens", *map(str, args.seq_lens), "--modes", *args.modes]
    if args.families:
        argv += ["--families", *args.families]
    if args.impls:
        argv += ["--impls", *args.impls]
    if args.threads is not None:
        argv += ["--threads", str(args.threads)]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.processes):
            path = Path(tmp) / f"run{i}.json"
            print(f"--- process {i + 1} of {args.processes}", flush=True)
            code = "import sys; from assocmem.training.cli import main; sys.exit(main(sys.argv[1:]))"
            subprocess.run([sys.executable, "-c", code, *argv, "--json", str(path)], check=True)
            runs.append(json.loads(path.read_text()))
    return runs
