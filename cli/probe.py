"""``assocmem probe graph-tracing | recall | causality | capacity | sounding | tts | niah``: the commands
that measure a model (the experiments are ``assocmem experiment NAME``, cli/experiment.py).

Every probe writes <out>/<probe>.json and its PNG figures into the output folder
named by ``--out`` and prints that folder when done. An existing non-empty
output folder is refused unless ``--overwrite``.

Models (MODEL arguments) are a saved HF model folder (``save_pretrained``; a run
folder of ``assocmem train`` is accepted and its ``final/`` is used), or an
assocmem model preset name (randomly initialised: for smoke tests only).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from . import sampling
from .types import finite_float, non_negative_float, positive_float, positive_int, seed_int


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """--out, --overwrite and --seed, the flags of every probe command."""
    p.add_argument("--out", required=True, help="output folder (refused if non-empty, unless --overwrite, which "
                   "replaces only a folder an assocmem command wrote)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing non-empty output folder")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of every random draw (default 0)")


def add_parser(subparsers) -> None:
    """Add ``probe`` and its sub-subcommands."""
    p = subparsers.add_parser("probe", help="representation and memory probes (JSON + PNG)",
                              description="Probes: in-context graph tracing, MQAR recall, causality, capacity, "
                                          "gradient sounding, test-time scaling (tts) and needle in a haystack "
                                          "(niah).")
    sub = p.add_subparsers(dest="probe", metavar="PROBE")
    sub.required = True
    for parser in [add(sub) for add in (_graph_parser, _recall_parser, _causality_parser, _capacity_parser,
                                        _sounding_parser)] + sampling.add_parsers(sub):
        add_common_flags(parser)


def report(fn, args: argparse.Namespace) -> int:
    """``fn(args)`` of a probe: its output folder printed (0), or a user error as "assocmem probe NAME: why" (2)."""
    from assocmem.probes.io import USER_ERRORS, run_command

    return run_command(fn, args, USER_ERRORS + (TypeError,))  # TypeError: capacity's spec argument


# ------------------------------------------------------------------ graph tracing
def _graph_parser(sub) -> argparse.ArgumentParser:
    g = sub.add_parser("graph-tracing", help="in-context graph tracing (Park et al. 2025): PCA, energy, accuracy")
    g.add_argument("model", help="saved model folder / run folder, a model preset name or a Hugging Face Hub id")
    g.add_argument("--graph", nargs="+", default=["grid"], choices=["grid", "ring", "hex"], help="graph(s)")
    g.add_argument("--walks", type=positive_int, default=16, help="walks in the batch (default 16)")
    g.add_argument("--length", type=positive_int, default=None,
                   help="walk length in tokens (default: the run's data.seq_len, whatever its task; 1200 for a "
                        "model without a run)")
    g.add_argument("--allow-other-settings", action="store_true",
                   help="walk a graph-walk run at a --length other than it was trained with, or any run beyond "
                        "the length it was trained with")
    g.add_argument("--window", type=positive_int, default=50, help="trailing window W of the class means (default 50)")
    g.add_argument("--pca-window", type=positive_int, default=None, help="window of the PCA class means (default W)")
    g.add_argument("--pca-contexts", type=positive_int, nargs="+", default=None, help="context lengths of PCA panels")
    g.add_argument("--batch-size", type=positive_int, default=4, help="walks per forward (default 4)")
    g.add_argument("--energy", choices=["park", "normalised"], default="park",
                   help="Dirichlet energy of the curves: park = Σ A_ij ‖x_i − x_j‖² as Park et al. define it "
                        "(default), normalised = ÷ 2d‖X‖²_F (probes/energy.py); the energy ratio is the same for both")
    g.set_defaults(run=f"{__name__}:graph_tracing")
    return g


def graph_tracing(args) -> int:
    return report(_graph_tracing, args)


def _graph_tracing(args) -> Path:
    from assocmem.probes import io
    from assocmem.probes.graph_tracing import save_graph_tracing_figures, trace_graph
    from assocmem.training.graphs import make_graph

    from assocmem.training.progress import progress_line

    say = progress_line("graph-tracing")
    say(f"{args.model}: reading the run and loading the model ...")
    trained = io.trained_lengths([args.model])  # any task: the longest input the model has seen
    args.length = io.settings_from_runs([args.model], {"seq_len": ("--length", args.length,
                                                                   min(trained.values(), default=1200))},
                                        kind="graph_walk", allow_other=args.allow_other_settings)["seq_len"]
    io.within_trained_length([args.model], args.length, "--length", allow_other=args.allow_other_settings)
    model, info = io.load_model(args.model)
    io.check_length(model, args.length, "--length")
    out = io.prepare_out(args.out, args.overwrite)
    report = {**info, "walk_length": args.length, "graphs": {}}
    for i, kind in enumerate(args.graph, 1):
        graph = make_graph(kind)
        res = trace_graph(model, graph, num_walks=args.walks, walk_length=args.length, window=args.window,
                          pca_window=args.pca_window, pca_contexts=args.pca_contexts, batch_size=args.batch_size,
                          seed=args.seed, energy=args.energy, report=lambda line, i=i, kind=kind: say(
                              f"graph {i}/{len(args.graph)} {kind}: {line}"))
        save_graph_tracing_figures(res, graph, out, name=f"graph_tracing_{kind}", title=f"{args.model} — {kind}")
        report["graphs"][kind] = res.to_json()
    io.write_json(out, "graph_tracing", report)
    return out


# ------------------------------------------------------------------ recall
def _recall_parser(sub) -> argparse.ArgumentParser:
    r = sub.add_parser("recall", help="MQAR accuracy vs key-value pairs and vs state size (Zoology)")
    r.add_argument("--models", nargs="*", default=[], help="saved model folders / run folders to evaluate")
    r.add_argument("--train-mixers", nargs="*", default=[], help="also train 2-layer MLP-free models of these "
                   "mixers (names/aliases of assocmem.mixers, e.g. gdn attn mamba2)")
    r.add_argument("--d-models", type=positive_int, nargs="+", default=[32, 64], help="widths of the trained models")
    r.add_argument("--train-kv-pairs", type=positive_int, default=8, help="K of the training data (default 8)")
    r.add_argument("--steps", type=positive_int, default=500, help="training steps per model (default 500)")
    r.add_argument("--lr", type=positive_float, default=3e-3, help="peak learning rate (default 3e-3)")
    r.add_argument("--seq-len", type=positive_int, default=None,
                   help="MQAR sequence length L (default: the --models runs' data.seq_len, else 64)")
    r.add_argument("--num-kv-pairs", type=positive_int, nargs="+", default=None,
                   help="K values evaluated (default: 2, 4, 8, 16 and the runs' own data.num_kv_pairs, those that fit "
                        "the length: 4·K <= seq_len)")
    r.add_argument("--vocab-size", type=positive_int, default=None,
                   help="MQAR vocabulary (default: the --models runs' data.vocab_size, else 256)")
    r.add_argument("--allow-other-settings", action="store_true",
                   help="probe run folders at a --seq-len / --vocab-size other than they were trained with")
    r.add_argument("--examples", type=positive_int, default=256, help="test examples per K (default 256)")
    r.set_defaults(run=f"{__name__}:recall")
    return r


def recall(args) -> int:
    return report(_recall, args)


def _recall(args) -> Path:
    from assocmem.probes import io
    from assocmem.probes.recall import (
        default_num_kv_pairs, max_kv_pairs, recall_vs_pairs, save_recall_figures, summarize, train_mqar_models,
    )

    if not args.models and not args.train_mixers:
        raise ValueError("give --models and/or --train-mixers")
    settings = io.settings_from_runs(
        args.models, {"seq_len": ("--seq-len", args.seq_len, 64), "vocab_size": ("--vocab-size", args.vocab_size, 256)},
        kind="mqar", allow_other=args.allow_other_settings)
    args.seq_len, args.vocab_size = settings["seq_len"], settings["vocab_size"]
    fits = max_kv_pairs(args.seq_len, args.vocab_size)
    if args.num_kv_pairs is None:
        own = tuple(d.num_kv_pairs for ref in args.models if (d := io.run_data(ref)) is not None and d.kind == "mqar")
        args.num_kv_pairs = default_num_kv_pairs(args.seq_len, args.vocab_size, own)
    elif max(args.num_kv_pairs) > fits:
        raise ValueError(f"--num-kv-pairs {max(args.num_kv_pairs)} does not fit seq_len {args.seq_len} / vocab_size "
                         f"{args.vocab_size} (4·K <= seq_len, K < vocab_size/2): use K <= {fits}")
    models, mixer_of = {}, {}
    for ref in args.models:
        models[ref], _ = io.load_model(ref)
        mixer_of[ref] = Path(ref).name
        io.check_length(models[ref], args.seq_len, "--seq-len")
    out = io.prepare_out(args.out, args.overwrite)
    trained = train_mqar_models(args.train_mixers, args.d_models, out_dir=out / "runs", seq_len=args.seq_len,
                                num_kv_pairs=args.train_kv_pairs, vocab_size=args.vocab_size, steps=args.steps,
                                lr=args.lr, seed=args.seed) if args.train_mixers else {}
    for label, (mixer, model) in trained.items():
        models[label], mixer_of[label] = model, mixer
    points = recall_vs_pairs(models, num_kv_pairs=args.num_kv_pairs, seq_len=args.seq_len,
                             vocab_size=args.vocab_size, mixer_of=mixer_of, num_examples=args.examples,
                             seed=args.seed + 1000)
    save_recall_figures(points, out)
    io.write_json(out, "recall", {"seq_len": args.seq_len, "vocab_size": args.vocab_size, **summarize(points)})
    return out


# ------------------------------------------------------------------ causality
def _causality_parser(sub) -> argparse.ArgumentParser:
    c = sub.add_parser("causality", help="perturb-the-future check: first leaking position and max leak")
    c.add_argument("targets", nargs="+", help="mixer preset names, spec YAML/JSON files, 'all-presets', "
                   "model folders or model preset names")
    c.add_argument("--seq-len", type=positive_int, default=19, help="sequence length (default 19)")
    c.add_argument("--atol", type=non_negative_float, default=0.0, help="allowed change (default 0: bit-identical)")
    c.add_argument("--ops", action="store_true", help="also check every exact form of each mixer spec's op")
    c.add_argument("--modes", nargs="+", choices=["eval", "train"], default=["eval"],
                   help="modes to check models in (default eval; add train for layers that run in training only, "
                        "e.g. Wiola's token merging; a model with dropout is random in train mode)")
    c.set_defaults(run=f"{__name__}:causality")
    return c


def _expand_targets(targets: list[str]) -> list[str]:
    from assocmem.mixers import list_presets

    return [t for target in targets for t in (list_presets() if target == "all-presets" else [target])]


def causality(args) -> int:
    return report(_causality, args)


def _causality(args) -> Path:
    from assocmem.mixers import ALIASES, MixerSpec, list_presets
    from assocmem.mixers.lower import APPROXIMATE, available_forms

    from assocmem.probes import io
    from assocmem.probes.causality import model_causality_in_modes, preset_mixer_causality, probe_ids, spec_causality
    from assocmem.probes.plotting import CurvePanel, save_curve_panels

    from assocmem.training.progress import progress

    io.check_out(args.out, args.overwrite)  # the folder is made once every target has been probed
    reports = []
    for target in progress(_expand_targets(args.targets), "causality"):
        if target in list_presets() or target in ALIASES or Path(target).suffix in (".yaml", ".yml", ".json"):
            spec = MixerSpec.from_yaml(target) if Path(target).is_file() else target
            reports.append(preset_mixer_causality(spec, seq_len=args.seq_len, atol=args.atol, seed=args.seed))
            if args.ops:
                from assocmem.probes.causality import tiny_spec

                s = tiny_spec(spec)
                for form in available_forms(s):
                    if form not in APPROXIMATE:
                        reports.append(spec_causality(s, form=form, seq_len=args.seq_len, atol=args.atol))
        else:
            model, _ = io.load_model(target)
            ids = probe_ids(int(model.config.vocab_size), args.seq_len, args.seed)
            reports += model_causality_in_modes(model, ids, args.modes, target=f"model:{target}", atol=args.atol,
                                                seed=args.seed)
    for r in reports:
        print(f"{r.target}: {'causal' if r.causal else f'LEAKS from position {r.first_leak}'} "
              f"(max leak {r.max_leak:.3g})")
    out = io.prepare_out(args.out, args.overwrite)
    panel = CurvePanel("max |Δ output| at position p when inputs after p change", "position p (token index)",
                       "leak: max |Δ output| (output units)",
                       {r.target: (list(range(r.seq_len)), list(r.leak)) for r in reports}, logx=False, logy=True)
    save_curve_panels(out / "causality.png", [panel])
    io.write_json(out, "causality", {"all_causal": all(r.causal for r in reports),
                                   "reports": [r.to_json() for r in reports]})
    return out


# ------------------------------------------------------------------ capacity
def _capacity_parser(sub) -> argparse.ArgumentParser:
    c = sub.add_parser("capacity", help="retrieval error vs number of stored random pairs at a fixed state size")
    c.add_argument("specs", nargs="*", help="mixer preset names or spec YAML/JSON files "
                   "(default: linear_attention, deltanet, sca, softmax)")
    c.add_argument("--num-pairs", type=positive_int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    c.add_argument("--key-dim", type=positive_int, default=32, help="K (default 32)")
    c.add_argument("--value-dim", type=positive_int, default=32, help="V (default 32); state budget K·V per head")
    c.add_argument("--trials", type=positive_int, default=8, help="independent sets of pairs (default 8)")
    c.add_argument("--form", default="auto", help="op form used for writes/reads (default auto)")
    c.set_defaults(run=f"{__name__}:capacity")
    return c


def capacity(args) -> int:
    return report(_capacity, args)


def _capacity_spec(name: str):
    """The MixerSpec of a spec file or a preset name; a name that is neither is a ValueError naming it."""
    from assocmem.mixers import MixerSpec, get_preset

    if Path(name).is_file():
        return MixerSpec.from_yaml(Path(name))
    try:
        return get_preset(name)
    except KeyError as err:
        raise ValueError(f"spec {name!r} is not a file and not a mixer preset: {err.args[0]}") from None


def _capacity(args) -> Path:
    from assocmem.probes import io
    from assocmem.probes.capacity import capacity_sweep
    from assocmem.training.progress import progress_line
    from assocmem.probes.plotting import CurvePanel, save_curve_panels

    memories = {Path(s).stem if Path(s).is_file() else s: _capacity_spec(s) for s in args.specs} or None
    out = io.prepare_out(args.out, args.overwrite)
    curves = capacity_sweep(memories, num_pairs=tuple(args.num_pairs), key_dim=args.key_dim,
                            value_dim=args.value_dim, trials=args.trials, form=args.form, seed=args.seed,
                            report=progress_line("capacity"))
    panels = [CurvePanel(f"{title} (K={args.key_dim}, V={args.value_dim})", "stored pairs N",
                         "relative MSE (Σ‖r − v‖² / Σ‖v‖²)",
                         {f"{c.label} [{c.state_floats} floats]": (c.num_pairs, getattr(c, key)) for c in curves})
              for title, key in (("raw", "rel_mse"), ("gain-corrected", "rel_mse_scaled"))]
    save_curve_panels(out / "capacity.png", panels)
    io.write_json(out, "capacity", {"key_dim": args.key_dim, "value_dim": args.value_dim,
                                  "curves": [c.to_json() for c in curves]})
    return out


# ------------------------------------------------------------------ sounding
def _sounding_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("sounding", help="the sounding hammer (seed 003 §4.4): Fourier regularity ρ of mean gradients",
                       description="ρ = top-K power / total power of the rfft of the mean gradient E_x[∇_W L] along "
                                   "an axis, for named parameters of any HF causal LM.")
    s.add_argument("model", help="a TrainConfig YAML (its model untrained, at its seed, on its data), a run folder "
                   "(its final model on its data), a saved HF model folder or a model preset (these need --data)")
    s.add_argument("--params", nargs="+", default=["*"], help="glob patterns of parameter names (default: all)")
    s.add_argument("--axis", type=int, default=0, help="the axis of each parameter to sound (default 0: rows)")
    s.add_argument("--length", type=positive_int, default=None, help="sound the first N indices of the axis only")
    s.add_argument("--top-k", type=positive_int, default=16, help="K of ρ (default 16, the paper's GPT-2 setting)")
    s.add_argument("--fourier-power", choices=["power_of_sum", "sum_of_powers"], default="power_of_sum",
                   help="P(k) of eq. 5: power_of_sum = |rfft(gradient summed over the other axes)[k]|² (default; "
                        "seed 003 §4.1: 'G is summed over the embedding dimension'), sum_of_powers = each column's "
                        "|rfft|² summed (training/fourier.py)")
    s.add_argument("--data", help="YAML file holding a `data:` section (or the section itself)")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a data field, e.g. --set data.p=97 (repeatable)")
    s.add_argument("--split", choices=["train", "eval"], default="train", help="which split the mean runs over")
    s.add_argument("--sequences", type=positive_int, default=None, help="use the first N sequences only (default: all)")
    s.add_argument("--batch-size", type=positive_int, default=64, help="sequences per backward pass (default 64)")
    s.add_argument("--threshold", type=finite_float, default=0.6, help="the paper's rule: FGP where ρ > threshold")
    s.set_defaults(run=f"{__name__}:sounding")
    return s


def sounding(args) -> int:
    from assocmem.probes.io import run_command
    from assocmem.probes.sounding import run_sounding

    return run_command(run_sounding, args)  # a ConfigError is a ValueError
