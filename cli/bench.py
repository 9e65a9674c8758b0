"""`assocmem bench mixers|breakdown|scaling|decode|train`: benchmarks (training/bench/) that print a table
and write JSON.

    mixers      forms.py      forms of each mixer family vs derived, recurrent and external peers
    breakdown   breakdown.py  where one form's time goes, by kind of op
    scaling     scaling.py    per-token cost of the chunk forms from 8k to 64k tokens
    decode      decode.py     per-token decode latency against context length
    train       train.py      training tokens/s per mixer in Zoology's MQAR model shape

Timings are ratios measured in one run on a noisy machine; nothing here is asserted in tests.
An existing --json/--markdown file is refused (before anything runs) unless --overwrite.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import handler, module_doc
from .types import non_negative_float, non_negative_int, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks (mixer forms, decode latency, training throughput)", description=__doc__)
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    kinds.required = True
    m = kinds.add_parser("mixers", help="forms of each mixer family vs derived, recurrent and external peers")
    m.add_argument("--json", type=Path, metavar="PATH", help="write the rows as a JSON list")
    m.add_argument("--markdown", type=Path, metavar="PATH", help="write the rows as a markdown table")
    m.add_argument("--families", nargs="+", default=None, metavar="FAMILY",
                   help="preset families (default: gated_deltanet mamba2 gla sca softmax)")
    m.add_argument("--seq-lens", nargs="+", type=positive_int, default=[512, 2048, 8192], metavar="T")
    m.add_argument("--modes", nargs="+", choices=["fwd", "fwdbwd"], default=["fwd", "fwdbwd"])
    m.add_argument("--impls", nargs="+", default=[], metavar="TEXT",
                   help="only implementations whose name contains one of these (e.g. chunk transformers)")
    m.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch intra-op threads for every implementation (default: torch's, all cores)")
    m.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the inputs live (cuda: FLA's Triton kernels join the peers when installed; "
                        "make bench-gpu); the matmul peak and peak memory stay host-side measurements")
    m.add_argument("--compiled", action="store_true",
                   help="also the compiled chunk / prefix_sum forms (torch.compile; the first call of each, which "
                        "compiles, is reported as compile_s: tens of seconds per graph on a small CPU)")
    m.add_argument("--processes", type=positive_int, default=1, metavar="N",
                   help="run the bench in N fresh processes, one after another, and report per row the "
                        "median ms over them with the range of each ratio (the allocator's state, which "
                        "shifts timings by up to 2x, differs between processes)")
    m.set_defaults(run=f"{__name__}:_mixers")
    b = kinds.add_parser("breakdown", help="where one form's time goes: products, solve, copies, elementwise",
                         description=module_doc("assocmem.training.bench.breakdown"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("family", nargs="?", default="gated_deltanet", help="mixer preset (default: gated_deltanet)")
    b.add_argument("--form", default="auto", help="form to profile (default: the one lower() picks)")
    b.add_argument("--seq-len", type=positive_int, default=2048, metavar="T")
    b.add_argument("--chunk-size", type=positive_int, default=None, metavar="C", help="default: the op's own")
    b.add_argument("--mode", choices=["fwd", "fwdbwd"], default="fwd")
    b.add_argument("--repeats", type=positive_int, default=11, help="timed calls (median) before the profiled ones")
    b.add_argument("--threads", type=positive_int, default=None, metavar="N", help="torch intra-op threads")
    b.add_argument("--compiled", action="store_true",
                   help="the form's compiled variant (torch.compile), its generated kernels listed by name")
    b.add_argument("--json", type=Path, metavar="PATH", help="write the breakdown as JSON")
    b.set_defaults(run=f"{__name__}:_breakdown")
    _add_scaling(kinds)
    _add_decode(kinds)
    _add_train(kinds)
    for kind, parser in kinds.choices.items():  # every bench writes measurements that took minutes to take
        parser.add_argument("--overwrite", action="store_true",
                            help="replace existing --json/--markdown files (default: refuse before running)")
        parser.set_defaults(run=f"{__name__}:refusing_existing", bench=parser.get_default("run"))


def _breakdown(args: argparse.Namespace) -> int:
    import torch

    from assocmem.training.bench.breakdown import breakdown, format_breakdown

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        result = breakdown(args.family, form=args.form, T=args.seq_len, chunk_size=args.chunk_size,
                           mode=args.mode, repeats=args.repeats, compiled=args.compiled)
    except (KeyError, ValueError) as err:
        print(f"assocmem bench breakdown: {err.args[0] if err.args else err}", file=sys.stderr)
        return 2
    print("\n".join(format_breakdown(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0


def output_problem(args: argparse.Namespace) -> str | None:
    """Why the bench's output files (``--json``, ``--markdown``) cannot be written, or None.

    An existing file is refused unless ``--overwrite``: a bench's numbers come from one run on
    one machine and cannot be regenerated. Checked before the bench runs, so nothing is wasted.
    """
    for flag in ("json", "markdown"):
        path = getattr(args, flag, None)
        if path is None:
            continue
        if path.is_dir():
            example = path / ("bench.md" if flag == "markdown" else "bench.json")
            return f"--{flag} {path} is a folder; give a file path such as {example}"
        if path.exists() and not args.overwrite:
            return f"--{flag} {path} exists; pass --overwrite to replace it, or choose another path"
        if not path.parent.is_dir():
            return f"--{flag} {path}: folder {path.parent} does not exist; create it first"
    return None


def refusing_existing(args: argparse.Namespace) -> int:
    """The bench ``args.bench`` (a handler's name) behind ``output_problem``: exit status 2 with the reason."""
    problem = output_problem(args)
    if problem is not None:
        print(f"assocmem bench {args.bench_kind}: {problem}", file=sys.stderr)
        return 2
    return handler(args.bench)(args)


def _mixers(args: argparse.Namespace) -> int:
    import torch

    from assocmem.training.bench.forms import FAMILIES, markdown_table, median_rows, ratio_table, run_bench

    if args.threads is not None:  # (counts are checked by argparse: cli/types.py positive_int)
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("assocmem bench mixers: --device cuda needs a CUDA build of torch and a GPU; this torch "
              f"({torch.__version__}) sees none. Run without --device (CPU) or on a GPU machine", file=sys.stderr)
        return 2
    runs = None
    if args.processes == 1:
        rows = run_bench(tuple(args.families or FAMILIES), tuple(args.seq_lens), tuple(args.modes),
                         only=tuple(args.impls), compiled=args.compiled, device=args.device)
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
    if args.compiled:
        argv += ["--compiled"]
    argv += ["--device", args.device]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.processes):
            path = Path(tmp) / f"run{i}.json"
            print(f"--- process {i + 1} of {args.processes}", flush=True)
            subprocess.run([sys.executable, "-m", "assocmem.cli", *argv, "--json", str(path)], check=True)
            runs.append(json.loads(path.read_text()))
    return runs


def _add_scaling(kinds: argparse._SubParsersAction) -> None:
    """Add `scaling` to the `assocmem bench` kinds."""
    p = kinds.add_parser("scaling", help="per-token cost of the chunk forms from 8k to 64k tokens",
                         description=module_doc("assocmem.training.bench.scaling"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=None, metavar="PRESET",
                   help="presets with a chunk form (default: one per chunk family, training/bench/scaling.py FAMILIES)")
    p.add_argument("--seq-lens", nargs="+", type=positive_int, default=None, metavar="T",
                   help="sequence lengths (default: 8192 16384 32768 65536, scaling.py SEQ_LENS)")
    p.add_argument("--mode", choices=["fwd", "fwdbwd"], default="fwdbwd")
    p.add_argument("--heads", type=positive_int, default=1, help="H (B = 1, K = V = 64)")
    p.add_argument("--repeats", type=positive_int, default=2, help="timed calls per T (median), after one warm-up")
    p.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the rows as a JSON list")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the rows as a markdown table")
    p.set_defaults(run=f"{__name__}:_scaling")


def _scaling(args: argparse.Namespace) -> int:
    import torch

    from assocmem.mixers.lower import available_forms
    from assocmem.mixers.presets import get_preset

    from assocmem.training.bench.scaling import FAMILIES, SEQ_LENS, markdown_table, run_scaling

    args.families, args.seq_lens = args.families or list(FAMILIES), args.seq_lens or list(SEQ_LENS)
    for name in args.families:
        try:
            forms = available_forms(get_preset(name))
        except KeyError as err:
            print(f"assocmem bench scaling: {err.args[0]}", file=sys.stderr)
            return 2
        if "chunk" not in forms:
            print(f"assocmem bench scaling: preset {name!r} has no chunk form (its forms: {forms}); choose presets "
                  f"of the hebbian, delta or dplr classes", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    rows = run_scaling(tuple(args.families), tuple(args.seq_lens), mode=args.mode, H=args.heads,
                       repeats=args.repeats)
    table = markdown_table(rows)
    print("\n" + table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.write_text(table + "\n")
        print(f"wrote {args.markdown}")
    return 0


def _add_decode(kinds: argparse._SubParsersAction) -> None:
    """Add `decode` to the `assocmem bench` kinds."""
    p = kinds.add_parser("decode", help="per-token decode latency vs context (attention, 75%% GDN hybrid, GDN)",
                         description=module_doc("assocmem.training.bench.decode"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path, metavar="PATH", help="write config, rows and ratios as JSON")
    p.add_argument("--contexts", nargs="+", type=positive_int, default=[1024, 4096, 16384], metavar="N")
    p.add_argument("--d-model", type=positive_int, default=512)
    p.add_argument("--layers", type=positive_int, default=12, help="depth of every model")
    p.add_argument("--vocab", type=positive_int, default=32000)
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--steps", type=positive_int, default=20, help="timed decode steps per context")
    p.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                   help="models of training/bench/decode.py MODELS (default: all: attention gdn75 gdn)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="intra-op threads (default 1: batch-1 decoding is a chain of small ops, where extra "
                        "threads only add hand-offs; on a shared 2-core machine 2 threads made the recurrent "
                        "layers' per-token GEMVs ~10x slower)")
    p.set_defaults(run=f"{__name__}:_decode")


def _decode(args: argparse.Namespace) -> int:
    import torch

    from assocmem.training.bench.decode import MODELS, run_decode_bench

    unknown = [m for m in args.models or () if m not in MODELS]
    if unknown:
        print(f"assocmem bench decode: unknown --models {unknown}; choose from {list(MODELS)}", file=sys.stderr)
        return 2
    args.models = args.models or list(MODELS)
    torch.set_num_threads(args.threads)
    result = run_decode_bench(tuple(args.contexts), d_model=args.d_model, n_layers=args.layers, vocab=args.vocab,
                              batch=args.batch, steps=args.steps, models=tuple(args.models))
    print("\nratios (same run):")
    for key, value in result["ratios"].items():
        print(f"  {key:40s} {value:6.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0


def _add_train(kinds: argparse._SubParsersAction) -> None:
    """Add `train` to the `assocmem bench` kinds."""
    p = kinds.add_parser("train", help="training tokens/s per mixer (MQAR model shape)",
                         description=module_doc("assocmem.training.bench.train"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixers", nargs="+", default=None, metavar="LAYER",
                   help="layer patterns, one model each (default: training/bench/train.py DEFAULT_MIXERS: "
                        "attn gdn gla mamba2 sca)")
    p.add_argument("--d-model", type=positive_int, default=128)
    p.add_argument("--n-layers", type=positive_int, default=2)
    p.add_argument("--num-heads", type=positive_int, default=2, help="heads of the recurrent mixers (attention: 1)")
    p.add_argument("--mlp-ratio", type=non_negative_float, default=0.0)
    p.add_argument("--vocab", type=positive_int, default=8192)
    p.add_argument("--seq-len", type=positive_int, default=256)
    p.add_argument("--num-kv-pairs", type=positive_int, default=16)
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--warmup", type=non_negative_int, default=3)
    p.add_argument("--steps", type=positive_int, default=10, help="timed steps per mixer")
    p.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--compile", action="store_true",
                   help="also time every mixer with its decoder torch.compile'd (as train.compile; the warm-up "
                        "steps compile, minutes on a small CPU)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write config and rows as JSON")
    p.set_defaults(run=f"{__name__}:_train_bench")


def _train_bench(args: argparse.Namespace) -> int:
    if args.vocab <= args.seq_len:
        print(f"assocmem bench train: --vocab must exceed --seq-len (Zoology's MQAR draws keys and values "
              f"from the vocabulary), got --vocab {args.vocab} and --seq-len {args.seq_len}", file=sys.stderr)
        return 2
    import torch

    from assocmem.training.bench.train import DEFAULT_MIXERS, run_train_bench

    args.mixers = args.mixers or list(DEFAULT_MIXERS)
    torch.set_num_threads(args.threads)
    print(f"training throughput: d_model {args.d_model}, {args.n_layers} layers, L={args.seq_len}, "
          f"batch {args.batch}, {args.threads} thread(s)")
    rows = run_train_bench(args)
    if args.json:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("run", "bench")}
        args.json.write_text(json.dumps({"config": config, "rows": rows}, indent=2))
        print(f"wrote {args.json}")
    return 0
