"""`assocmem bench mixers|backends|breakdown|scaling|decode|train|models|smoke`: benchmarks (training/bench/)
that print a table and write JSON.

    mixers      forms.py      forms of each mixer family vs derived, recurrent and external peers
                              (--device cuda: the backends bench below)
    backends    backends.py   every kernel backend vs FLA's kernel called directly and SDPA (GPU shapes)
    breakdown   breakdown.py  where one form's time goes, by kind of op
    scaling     scaling.py    per-token cost of the chunk forms from 8k to 64k tokens
    decode      decode.py     per-token decode latency against context length
    train       train.py      training tokens/s per mixer in Zoology's MQAR model shape
                              (--device cuda: the models bench below)
    models      lm.py         tokens/s and peak memory of preset models vs a same-size Llama, bf16 autocast
    smoke       smoke.py      every preset model and hybrid trains one step under bf16 autocast

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
    m.add_argument("--seq-lens", nargs="+", type=positive_int, default=None, metavar="T",
                   help="default: 512 2048 8192 (--device cuda: 2048 8192)")
    m.add_argument("--modes", nargs="+", choices=["fwd", "fwdbwd"], default=["fwd", "fwdbwd"])
    m.add_argument("--impls", nargs="+", default=[], metavar="TEXT",
                   help="only implementations whose name contains one of these (e.g. chunk transformers)")
    m.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch intra-op threads for every implementation (default: torch's, all cores)")
    m.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: run `assocmem bench backends --device cuda` (FLA's kernel called directly, auto, "
                        "compiled, eager, transformers and SDPA at B=8, H=16, K=V=128, bf16; make bench-gpu) with "
                        "these --families, --seq-lens, --modes, --json and --markdown")
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
    _add_backends(kinds)
    _add_scaling(kinds)
    _add_decode(kinds)
    _add_train(kinds)
    _add_models(kinds)
    _add_smoke(kinds)
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

    if args.device == "cuda":
        return _backends(_defaults(_add_backends, "backends", families=args.families, seq_lens=args.seq_lens,
                                   modes=args.modes, json=args.json, markdown=args.markdown, overwrite=args.overwrite))
    if args.threads is not None:  # (counts are checked by argparse: cli/types.py positive_int)
        torch.set_num_threads(args.threads)
    args.seq_lens = args.seq_lens or [512, 2048, 8192]
    runs = None
    if args.processes == 1:
        rows = run_bench(tuple(args.families or FAMILIES), tuple(args.seq_lens), tuple(args.modes),
                         only=tuple(args.impls), compiled=args.compiled)
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
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return _report(args, table)


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
                   help="models of training/bench/decode.py MODELS (default: all: attention gqa mla gdn75 gdn)")
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
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: run `assocmem bench models --device cuda` (thesis-150m-gdn-75 and its Llama, B=8, "
                        "T 2048 and 8192, bf16 autocast) with this --json")
    p.add_argument("--json", type=Path, metavar="PATH", help="write config and rows as JSON")
    p.set_defaults(run=f"{__name__}:_train_bench")


def _train_bench(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        return _models(_defaults(_add_models, "models", json=args.json, overwrite=args.overwrite))
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


# ------------------------------------------------------------------ GPU benches: backends, models, smoke


def _no_cuda(prog: str, device: str) -> bool:
    """Print why ``--device cuda`` cannot run here; True when it cannot."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        print(f"{prog}: --device cuda needs a CUDA build of torch and a GPU; this torch ({torch.__version__}) sees "
              f"none. Run with --device cpu (small shapes) or on a GPU machine", file=sys.stderr)
        return True
    return False


def _json_writer(path: Path | None, config: dict):
    """on_row callback: rewrite ``path`` with {config, rows} after every row (a killed run keeps its rows)."""
    if path is None:
        return None

    def write(rows: list[dict]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"config": config, "rows": rows}, indent=2, default=str))
        tmp.replace(path)

    return write


def _report(args: argparse.Namespace, table: str) -> int:
    """Print a bench's markdown table, write it to --markdown, name the files written (--json: by the bench)."""
    print("\n" + table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    for path in (args.json, args.markdown):
        if path:
            print(f"wrote {path}")
    return 0


def _budgets(p: argparse.ArgumentParser, total: float, case: float) -> None:
    p.add_argument("--budget-s", type=non_negative_float, default=total, metavar="S",
                   help=f"seconds for the whole bench; rows past it read 'skipped: budget' (default {total:g})")
    p.add_argument("--case-budget-s", type=non_negative_float, default=case, metavar="S",
                   help=f"seconds for one row, compiling included (default {case:g})")


# the choices of the GPU benches, kept here so that building the parsers imports no torch
# (tests/training/bench/test_bench_gpu.py holds them equal to training/bench/backends.py and lm.py)
BACKEND_FAMILIES = ("gated_deltanet", "mamba2", "gla", "deltanet", "kda", "sca", "huber_delta")
BACKEND_COLUMNS = ("fla", "auto", "compiled", "eager", "transformers", "sdpa")
BACKEND_DTYPES = ("bf16", "fp16", "fp32")
MODEL_PRESETS = ("thesis-150m-gdn-75",)
BACKENDS = ("auto", "torch", "compiled", "fla")


def _add_backends(kinds: argparse._SubParsersAction) -> None:
    """Add `backends` to the `assocmem bench` kinds."""
    FAMILIES, COLUMNS, DTYPES = BACKEND_FAMILIES, BACKEND_COLUMNS, BACKEND_DTYPES
    p = kinds.add_parser("backends", help="every kernel backend vs FLA's kernel called directly and SDPA (GPU shapes)",
                         description=module_doc("assocmem.training.bench.backends"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), metavar="PRESET",
                   help=f"mixer presets (default: {' '.join(FAMILIES)})")
    p.add_argument("--seq-lens", nargs="+", type=positive_int, default=[2048, 8192], metavar="T")
    p.add_argument("--modes", nargs="+", choices=["fwd", "fwdbwd"], default=["fwd", "fwdbwd"])
    p.add_argument("--impls", nargs="+", choices=list(COLUMNS), default=list(COLUMNS),
                   help="implementations to run (eager always runs: it is the reference of the checks)")
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--heads", type=positive_int, default=16)
    p.add_argument("--head-dim", type=positive_int, default=128, help="K = V")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="of q, k, v (the gates stay float32)")
    p.add_argument("--repeats", type=positive_int, default=10, help="timed calls per row (median), after 2 warm-ups")
    p.add_argument("--tol", type=non_negative_float, default=None,
                   help="largest relative error against eager that passes (default: by dtype, backends.TOL)")
    p.add_argument("--naive-fla", action="store_true",
                   help="FLA's pure-torch naive references (fla-core, no triton) in place of its Triton kernels, "
                        "on the given device: checks the bench's FLA rows without a GPU")
    _budgets(p, 270.0, 45.0)
    p.add_argument("--json", type=Path, metavar="PATH", help="write {config, rows} as JSON (rewritten after each row)")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the tables as markdown")
    p.set_defaults(run=f"{__name__}:_backends")


def _defaults(register, kind: str, **given) -> argparse.Namespace:
    """The namespace of `bench KIND` (added by ``register``) with its defaults, updated by ``given`` (None
    values keep the default): what `bench mixers --device cuda` and `bench train --device cuda` run."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register(sub)
    args = parser.parse_args([kind])
    for key, value in given.items():
        if value is not None:
            setattr(args, key, value)
    args.overwrite = bool(given.get("overwrite"))
    return args


def _backends(args: argparse.Namespace) -> int:
    import torch

    from assocmem.training.bench.backends import DTYPES, Shape, environment, markdown_tables, run_backends

    if _no_cuda("assocmem bench backends", args.device):
        return 2
    env = None
    if args.naive_fla:
        from assocmem.mixers.external import fla_naive_kernels
        from assocmem.mixers.kernels import FlaEnv

        kernels = fla_naive_kernels()
        if kernels is None:
            print("assocmem bench backends: --naive-fla needs fla-core installed (pip install --no-deps fla-core)",
                  file=sys.stderr)
            return 2
        env = FlaEnv(fla=True, kernels=kernels, device_type=args.device, float64=True)
    shape = Shape(B=args.batch, H=args.heads, K=args.head_dim, V=args.head_dim, dtype=DTYPES[args.dtype])
    config = {**environment(args.device), "B": shape.B, "H": shape.H, "K": shape.K, "V": shape.V, "dtype": args.dtype,
              "families": args.families, "seq_lens": args.seq_lens, "modes": args.modes, "repeats": args.repeats,
              "budget_s": args.budget_s, "case_budget_s": args.case_budget_s, "naive_fla": args.naive_fla}
    print(f"kernel backends on {config.get('gpu', args.device)}: B={shape.B}, H={shape.H}, K=V={shape.K}, "
          f"{args.dtype} q/k/v, torch {torch.__version__}, triton {config['triton']}, fla {config['fla-core']}")
    rows = run_backends(tuple(args.families), tuple(args.seq_lens), tuple(args.modes), shape=shape, device=args.device,
                        env=env, impls=tuple(args.impls), repeats=args.repeats, budget_s=args.budget_s,
                        case_budget_s=args.case_budget_s, tol=args.tol, on_row=_json_writer(args.json, config))
    tables = markdown_tables(rows)
    return _report(args, tables)


def _add_models(kinds: argparse._SubParsersAction) -> None:
    """Add `models` to the `assocmem bench` kinds."""
    DEFAULT_PRESETS = MODEL_PRESETS
    p = kinds.add_parser("models", help="tokens/s and peak memory of preset models vs a same-size Llama (bf16)",
                         description=module_doc("assocmem.training.bench.lm"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS), metavar="PRESET",
                   help=f"model presets (default: {' '.join(DEFAULT_PRESETS)})")
    p.add_argument("--seq-lens", nargs="+", type=positive_int, default=[2048, 8192], metavar="T")
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="bf16: under bf16 autocast")
    p.add_argument("--backend", choices=list(BACKENDS), default=None,
                   help="kernel backend of every recurrent layer (default: each layer's, auto)")
    p.add_argument("--no-llama", dest="llama", action="store_false", help="leave out the Llama of each preset")
    p.add_argument("--warmup", type=positive_int, default=2, help="untimed steps, the first timed on its own")
    p.add_argument("--steps", type=positive_int, default=5, help="timed steps (median)")
    _budgets(p, 200.0, 90.0)
    p.add_argument("--json", type=Path, metavar="PATH", help="write {config, rows} as JSON (rewritten after each row)")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the table as markdown")
    p.set_defaults(run=f"{__name__}:_models")


def _models(args: argparse.Namespace) -> int:
    from assocmem.models.presets import list_model_presets

    from assocmem.training.bench.backends import environment
    from assocmem.training.bench.lm import markdown_table, run_models

    if _no_cuda("assocmem bench models", args.device):
        return 2
    unknown = [p for p in args.presets if p not in list_model_presets()]
    if unknown:
        print(f"assocmem bench models: unknown model presets {unknown}; choose from {list_model_presets()}",
              file=sys.stderr)
        return 2
    config = {**environment(args.device), **{k: v for k, v in vars(args).items()
                                             if k in ("presets", "seq_lens", "batch", "precision", "backend", "warmup",
                                                      "steps", "budget_s", "case_budget_s")}}
    print(f"training throughput on {config.get('gpu', args.device)}: batch {args.batch}, {args.precision}, AdamW")
    rows = run_models(tuple(args.presets), tuple(args.seq_lens), batch=args.batch, device=args.device,
                      precision=args.precision, backend=args.backend, llama=args.llama, warmup=args.warmup,
                      steps=args.steps, budget_s=args.budget_s, case_budget_s=args.case_budget_s,
                      on_row=_json_writer(args.json, config))
    table = markdown_table(rows)
    return _report(args, table)


def _add_smoke(kinds: argparse._SubParsersAction) -> None:
    """Add `smoke` to the `assocmem bench` kinds."""
    p = kinds.add_parser("smoke", help="every preset model and hybrid trains one step under bf16 autocast",
                         description=module_doc("assocmem.training.bench.smoke"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="only the *-tiny presets, hybrids at d_model 32 (CPU checks)")
    p.add_argument("--presets", nargs="*", default=None, metavar="PRESET",
                   help="model presets instead of all of them (none: only the hybrids)")
    p.add_argument("--layers", nargs="*", default=None, metavar="PATTERN",
                   help="hybrid patterns instead of the default list (smoke.HYBRIDS and every 'PRESET,attn'; "
                        "none: only the presets)")
    p.add_argument("--width", type=positive_int, default=256, help="d_model of the hybrids (heads of 64)")
    p.add_argument("--batch", type=positive_int, default=2)
    p.add_argument("--seq-len", type=positive_int, default=256, metavar="T")
    p.add_argument("--backend", choices=list(BACKENDS), default=None,
                   help="kernel backend of every recurrent layer (default: each layer's, auto)")
    _budgets(p, 600.0, 60.0)
    p.add_argument("--json", type=Path, metavar="PATH", help="write {config, rows} as JSON (rewritten after each row)")
    p.set_defaults(run=f"{__name__}:_smoke")


def _smoke(args: argparse.Namespace) -> int:
    from assocmem.training.bench.backends import environment
    from assocmem.training.bench.smoke import configurations, run_smoke

    if _no_cuda("assocmem bench smoke", args.device):
        return 2
    try:
        configs = configurations(args.tiny, args.width, None if args.layers is None else tuple(args.layers),
                                 None if args.presets is None else tuple(args.presets))
    except ValueError as err:
        print(f"assocmem bench smoke: {err}", file=sys.stderr)
        return 2
    config = {**environment(args.device), "tiny": args.tiny, "batch": args.batch, "seq_len": args.seq_len,
              "backend": args.backend}
    print(f"one bf16-autocast training step of {len(configs)} configurations on {config.get('gpu', args.device)}:")
    rows = run_smoke(configs, device=args.device, batch=args.batch, seq_len=args.seq_len, backend=args.backend,
                     case_budget_s=args.case_budget_s, budget_s=args.budget_s, on_row=_json_writer(args.json, config))
    failed = [r for r in rows if r["status"] != "ok"]
    for message in sorted({w for r in rows for w in r["warnings"]}):
        print(f"warning: {message}")
    print(f"\n{len(rows) - len(failed)} of {len(rows)} configurations train a step"
          + (f"; failed: {', '.join(r['config'] for r in failed)}" if failed else ""))
    if args.json:
        print(f"wrote {args.json}")
    return 1 if failed else 0
