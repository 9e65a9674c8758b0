"""``assocmem train CONFIG.yaml [--set key=value ...] [--resume | --overwrite]`` and ``assocmem eval RUN_DIR``.

Under torchrun the same command trains with DDP on every process:

    torchrun --nproc_per_node=2 -m assocmem.cli train CONFIG.yaml
"""
from __future__ import annotations

import argparse
import json
import sys
from importlib.resources import files
from pathlib import Path

from .types import positive_int, seed_int


INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT)
SMOKE_HELP = ("apply the config's smoke: section before any --set: the recipe shrunk (model, steps, data) to a run "
              "of seconds on a CPU (docs/recipes.md)")


def add_parser(subparsers) -> None:
    """Add the ``train`` and ``eval`` subcommands."""
    p = subparsers.add_parser("train", help="train a model from a YAML TrainConfig",
                              description="Train a model from a YAML TrainConfig (see training/configs/).")
    bundled = Path(str(files("assocmem.training").joinpath("configs")))  # training/config_files.bundled_configs
    shipped = ", ".join(sorted(c.stem for c in bundled.glob("*.yaml"))
                        + sorted(f"recipes/{c.stem}" for c in (bundled / "recipes").glob("*.yaml")))
    p.add_argument("config", help=f"YAML TrainConfig (or sweep) file, the name of a bundled config or recipe "
                   f"({shipped}), "
                   "or with --resume a run folder (resumed where it is, e.g. after moving it)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set optim.lr=1e-3 --set model.hybrid.layers=gdn,attn (repeatable)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="continue the run from its newest checkpoint that verifies (exact); "
                      "--set train.steps=N extends it")
    mode.add_argument("--overwrite", action="store_true",
                      help="replace an existing run folder of the same name (and the --result file)")
    p.add_argument("--print-config", action="store_true", help="print the validated config(s) and exit")
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    p.add_argument("--seeds", type=seed_int, nargs="+", metavar="S",
                   help="train once per seed (run <name>-s<S>; finished runs are reused) and print mean and range")
    p.add_argument("--result", metavar="PATH",
                   help="with --seeds: write the result record (training/results.py) to PATH; refused if it "
                        "exists, unless --overwrite")
    p.add_argument("--list", action="store_true", help="sweep files: list the runs and their status, then exit")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="sweep files: train only runs whose name contains TEXT (repeatable: any of them)")
    p.set_defaults(run=f"{__name__}:_train")

    e = subparsers.add_parser("eval", help="evaluate a trained run",
                              description="Evaluate a run's checkpoint on its eval set or on other data.")
    e.add_argument("run_dir", help="a run folder (with config.yaml and checkpoints/)")
    e.add_argument("--data", help="YAML file holding a `data:` section (or the section itself) to evaluate on")
    e.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override config fields before evaluating, e.g. --set data.num_kv_pairs=32")
    e.add_argument("--problems", metavar="FILE", help="evaluate on a problem file (.jsonl/.json/.parquet): loss on "
                   "prompt + reference and greedy answer accuracy, with the run's tokenizer; its options by --set, "
                   "e.g. --set data.extractor=boxed (training/verifiable/problem_file.py)")
    e.add_argument("--checkpoint", help="checkpoint folder (default: the run's latest)")
    e.add_argument("--batch-size", type=positive_int, help="sequences per forward, >= 1 (default: train.eval_batch_size)")
    e.add_argument("--json", help="write the metrics to this file (default: RUN_DIR/eval.json); an existing "
                   "file is refused unless --overwrite")
    e.add_argument("--overwrite", action="store_true", help="replace an existing metrics file")
    e.set_defaults(run=f"{__name__}:_eval")


def _run_folder_config(args: argparse.Namespace) -> None:
    """``train RUN_DIR --resume``: the folder's config.yaml, with output_dir and name set to where the folder is now."""
    from assocmem.training.config_files import ConfigError

    run_dir = Path(args.config)
    if not args.resume:
        raise ConfigError(f"{run_dir} is a folder; pass a config file, or add --resume to continue the run it holds")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} holds no config.yaml; it is not a run folder")
    args.config = str(run_dir / "config.yaml")
    where = run_dir.resolve()
    args.overrides = [f"output_dir={where.parent}", f"name={where.name}", *args.overrides]


def _train(args: argparse.Namespace) -> int:
    from assocmem.training.config import load_config
    from assocmem.training.config_files import ConfigError, resolve_config
    from assocmem.training.sweep import is_sweep

    args.config_given = args.config
    try:
        if Path(args.config).is_dir():
            _run_folder_config(args)
        args.config = resolve_config(args.config)
        sweep = is_sweep(args.config)
    except ConfigError as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    if args.result and not args.seeds:
        print("assocmem train: --result needs --seeds (a result is a set of seeds)", file=sys.stderr)
        return 2
    if args.smoke and args.seeds:
        print("assocmem train: --smoke runs one seed; leave out --seeds (or --set seed=N)", file=sys.stderr)
        return 2
    if sweep:
        return _sweep(args)
    if args.seeds:
        return _seeds(args)
    try:
        cfg = load_config(args.config, args.overrides, smoke=args.smoke)
    except ConfigError as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    return _train_one(cfg, resume=args.resume, overwrite=args.overwrite)


def _train_one(cfg, *, resume: bool, overwrite: bool) -> int:
    """Train one run; print its summary line (0), or the error without a traceback (1: the run failed,
    2: the run folder, config or data was refused)."""
    from assocmem.training.checkpoint import CheckpointError
    from assocmem.training.loop import NonFiniteLossError, TrainingInterrupted, train
    from assocmem.training.out_of_memory import OutOfMemory

    try:
        summary = train(cfg, resume=resume, overwrite=overwrite)
    except TrainingInterrupted as stop:  # Ctrl-C: the checkpoint is written, the message says how to resume
        print(f"assocmem train: {stop}", file=sys.stderr)
        return INTERRUPTED
    except (NonFiniteLossError, CheckpointError, OutOfMemory) as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:  # run folder refused, config/data invalid
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("name", "steps", "tokens_per_s", "eval")}))
    return 0


def _seeds(args: argparse.Namespace) -> int:
    """``--seeds``: the config once per seed, a mean/range table and (``--result``) a result record."""
    from assocmem.training.checkpoint import CheckpointError
    from assocmem.training.loop import NonFiniteLossError, TrainingInterrupted
    from assocmem.training.out_of_memory import OutOfMemory
    from assocmem.training.results import current_versions, make_record, save_record
    from assocmem.training.seeds import seed_config, seeds_table, train_seeds

    current_versions()  # read now: the code this process runs, whatever is committed while it trains

    if args.result and Path(args.result).exists() and not args.overwrite:
        print(f"assocmem train: --result {args.result} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    try:
        if args.print_config:
            print("---\n".join(seed_config(args.config, args.overrides, s).to_yaml() for s in args.seeds), end="")
            return 0
        per_seed = train_seeds(args.config, args.overrides, args.seeds, overwrite=args.overwrite)
    except TrainingInterrupted as stop:
        print(f"assocmem train: {stop}", file=sys.stderr)
        return INTERRUPTED
    except (NonFiniteLossError, CheckpointError, OutOfMemory) as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:  # ConfigError, a run folder refused, data invalid
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    print(seeds_table(per_seed), end="")
    if args.result:
        cfg = seed_config(args.config, args.overrides, args.seeds[0])
        record = make_record(name=Path(args.result).stem, command=_command(args), seeds=args.seeds,
                             per_seed=per_seed, description=f"assocmem train {Path(args.config).stem}, "
                             f"{len(args.seeds)} seeds (TrainConfig.seed; data.seed {cfg.data.seed} fixed)",
                             extra={"config": cfg.model_dump(mode="json")})
        save_record(record, args.result, overwrite=args.overwrite)
        print(f"result: {args.result}")
    return 0


def _eval_output(args: argparse.Namespace) -> Path:
    """Where ``eval`` writes its JSON, checked before the work (the parent must be a folder, the path not
    one, and an existing file is replaced only with --overwrite)."""
    out = Path(args.json) if args.json else Path(args.run_dir) / "eval.json"
    if out.is_dir():
        raise ValueError(f"--json {out} is a folder; give a file path")
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"{out} exists (an earlier evaluation); pass --overwrite to replace it or --json "
                              f"to write elsewhere")
    if not out.parent.is_dir():
        raise ValueError(f"--json {out}: the folder {out.parent} does not exist")
    return out


def _eval(args: argparse.Namespace) -> int:
    from assocmem.training.checkpoint import CheckpointError
    from assocmem.training.evaluate import evaluate_run

    try:
        out = _eval_output(args)
        metrics = evaluate_run(args.run_dir, data=args.data, overrides=args.overrides,
                               checkpoint=args.checkpoint, batch_size=args.batch_size, problems=args.problems)
    except CheckpointError as err:
        print(f"assocmem eval: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:  # ConfigError is a ValueError
        print(f"assocmem eval: {err}", file=sys.stderr)
        return 2
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(metrics, indent=2))
    tmp.replace(out)  # atomic: a reader sees the old file or the new one
    print(json.dumps(metrics))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    """Train every run of a sweep file in order (finished runs skipped, interrupted ones resumed)."""
    from assocmem.training.config_files import ConfigError
    from assocmem.training.sweep import load_sweep, markdown_table, results_table, run_status

    if args.result and Path(args.result).exists() and not args.overwrite:
        print(f"assocmem train: --result {args.result} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    if args.result:
        from assocmem.training.results import current_versions

        current_versions()  # read now: the code this process runs
    try:
        spec, runs = load_sweep(args.config, args.overrides, seeds=args.seeds, smoke=args.smoke)
    except ConfigError as err:
        print(f"assocmem train: {err}", file=sys.stderr)
        return 2
    chosen = [(labels, cfg) for labels, cfg in runs if not args.only or any(t in cfg.name for t in args.only)]
    if args.list or args.print_config:
        for _, cfg in chosen:
            print(cfg.to_yaml() + "---" if args.print_config else f"{run_status(cfg):8s} {cfg.name}")
        return 0
    for i, (_, cfg) in enumerate(chosen):
        status = run_status(cfg)
        if status == "done" and not args.overwrite:
            print(f"[{i + 1}/{len(chosen)}] {cfg.name}: done, skipped")
            continue
        print(f"[{i + 1}/{len(chosen)}] {cfg.name}: {'resuming' if status == 'started' else 'training'}")
        code = _train_one(cfg, resume=status == "started" and not args.overwrite, overwrite=args.overwrite)
        if code:
            return code
    table = results_table(spec, runs)
    out = Path(runs[0][1].output_dir) / Path(args.config).stem
    out.with_suffix(".results.json").write_text(json.dumps(table, indent=2))
    out.with_suffix(".results.md").write_text(markdown_table(table))
    print(markdown_table(table), end="")
    if args.result:
        _sweep_result(args, spec, table)
    return 0


def _sweep_result(args: argparse.Namespace, spec, table: list[dict]) -> None:
    """The result record of a sweep run with --seeds: per seed, the best metric of every row."""
    from assocmem.training.results import write_result
    from assocmem.training.sweep import SEED_AXIS, seed_metrics

    per_seed = seed_metrics(spec, table)
    missing = sorted(set(args.seeds) - set(per_seed))
    if missing:
        raise SystemExit(f"assocmem train: seeds {missing} have no finished run; no result written")
    write_result(args.result, name=Path(args.result).stem, command=_command(args), seeds=args.seeds,
                 per_seed={s: per_seed[s] for s in args.seeds}, overwrite=args.overwrite,
                 description=f"sweep {Path(args.config).stem}: best {spec.metric} over {spec.best_over} per row, "
                 f"per seed (TrainConfig.seed)",
                 extra={"best": {f"{r[SEED_AXIS]}/" + "/".join(str(r[a]) for a in spec.axes
                                                               if a not in (SEED_AXIS, spec.best_over)): r["best"]
                                 for r in table}})
    print(f"result: {args.result}")


def _command(args: argparse.Namespace) -> str:
    """The command as typed, rebuilt from the parsed arguments (config as given, seeds, --set, --result)."""
    from assocmem.training.results import command_line

    return command_line("assocmem", ["train", args.config_given, "--seeds", *map(str, args.seeds),
                                     *[a for o in args.overrides for a in ("--set", o)],
                                     *[a for t in getattr(args, "only", []) for a in ("--only", t)],
                                     "--result", args.result])
