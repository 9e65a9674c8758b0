"""``assocmem probe tts`` and ``assocmem probe niah``: sampling-based evaluation after training.

Where the problems come from (``tts``), in order:
  --problems-file FILE   records with a prompt field and a reference field (default: GSM8K's question and
                         answer ending in '#### <number>'), answers read by --extractor (boxed, gsm8k,
                         last_number, multiple_choice), tokenized with --tokenizer (default: bytes; an HF
                         tokenizer's chat template applies unless --chat-template off)
  --task NAME            a verifiable task (chain_sum, graph_path, modular, needle) with --task-param k=v
  (neither)              the task a run folder was trained on (its config.yaml): held-out problems
                         (``modular``: Nanda's test split; the others: drawn from data.eval_seed)
--mode parallel draws --samples per problem (pass@k, maj@k, best-of-N, weighted vote); sequential runs
--chains chains per problem through --rounds of check (the model itself, or --verifier) and revision
(probes/sequential_tts.py); both does both and draws them on one equal-compute figure (accuracy against
tokens generated). --verifier NAME[=WEIGHT] (repeatable) scores samples for best-of-N and the sequential
check: registered rewards (correct, ...) or verifiers defined with --verifier-spec NAME='{kind: model,
folder: JUDGE}' (kinds exact_match, numeric, python, model; training/verifiable/verifiers.py).
``niah`` probes a run trained on ``data.kind: needle`` on its own layout (training length = its
data.seq_len), a ``needle`` layout given with --task-param, or a local text haystack (--text).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .types import finite_float, non_negative_float, non_negative_int, positive_int, probability, seed_int


def add_parsers(sub) -> list[argparse.ArgumentParser]:
    """Add the ``tts`` and ``niah`` probe subcommands (to ``assocmem probe``'s subparsers); cli/probe.py adds the
    common flags to the parsers returned."""
    return [_tts_parser(sub), _niah_parser(sub)]


def tts(args) -> int:
    from assocmem.probes.io import USER_ERRORS, run_command

    return run_command(_tts, args, USER_ERRORS + (TypeError,))


def niah(args) -> int:
    from assocmem.probes.io import USER_ERRORS, run_command

    return run_command(_niah, args, USER_ERRORS + (TypeError,))


def _params(items: list[str]) -> dict:
    from assocmem.mixers.yaml_text import load_yaml

    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--task-param expects key=value (e.g. num_digits=8), got {item!r}")
        key, raw = item.split("=", 1)
        out[key.strip()] = load_yaml(raw, source=f"--task-param {key.strip()}")
    return out


def _run_data(model_ref: str):
    """The ``data`` section of the run folder ``model_ref`` (None when it is not a run folder)."""
    from assocmem.training.config import load_config

    config = Path(model_ref) / "config.yaml"
    return load_config(config).data if config.is_file() else None


def _check_vocab(model, vocab_size: int) -> None:
    have = int(model.config.vocab_size)
    if vocab_size > have:
        raise ValueError(f"the task uses {vocab_size} token ids but the model's vocabulary has {have}")


# ------------------------------------------------------------------ tts
def _tts_parser(sub) -> argparse.ArgumentParser:
    t = sub.add_parser("tts", help="test-time scaling: pass@k, maj@k, best-of-N and weighted vote against k",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("model", help="saved model folder or run folder (a run folder also names its task)")
    t.add_argument("--task", help="a verifiable task: chain_sum, graph_path, modular, needle")
    t.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE", help="task parameter (repeatable)")
    t.add_argument("--problems-file", help="local GSM8K-style .jsonl/.json/.parquet file")
    t.add_argument("--tokenizer", default="bytes", help="for --problems-file: 'bytes' or a local HF tokenizer folder")
    t.add_argument("--prompt-field", default="question", help="for --problems-file (default question)")
    t.add_argument("--answer-field", default="answer", help="for --problems-file (default answer)")
    t.add_argument("--prompt-template", default="{prompt}", help="for --problems-file, e.g. 'Q: {prompt}\\nA:'")
    t.add_argument("--extractor", default="gsm8k", help="for --problems-file: answer extractor of responses (boxed, "
                   "gsm8k, last_number, multiple_choice, whole)")
    t.add_argument("--reference-extractor", help="for --problems-file: extractor of the reference field (default: "
                   "--extractor; 'whole' when the field is the bare answer)")
    t.add_argument("--metadata-field", action="append", default=[], help="for --problems-file: a field kept in the "
                   "problem's metadata (repeatable)")
    t.add_argument("--chat-template", choices=["auto", "on", "off"], default="auto",
                   help="for --problems-file: wrap prompts in the tokenizer's chat template (auto: when it has one)")
    t.add_argument("--system-prompt", help="for --problems-file: a system turn before the prompt")
    t.add_argument("--mode", choices=["parallel", "sequential", "both"], default="parallel",
                   help="parallel sampling, sequential check-and-revise rounds, or both (default parallel)")
    t.add_argument("--chains", type=positive_int, default=4, help="sequential: chains per problem (default 4)")
    t.add_argument("--rounds", type=non_negative_int, default=2, help="sequential: revision rounds after the first answer "
                   "(default 2)")
    t.add_argument("--check", choices=["self", "verifier"], default="self",
                   help="sequential: who checks a response, the model itself (p(yes) after --verify-prompt) or "
                        "--verifier (default self)")
    t.add_argument("--verify-prompt", default="\nIs the answer above correct? Answer Yes or No.\nAnswer:",
                   help="sequential self-check: text after the response; the next token is read")
    t.add_argument("--revise-prompt", default="\nThe answer above may be wrong. Solve it again.\n",
                   help="sequential: text after a rejected response, before the revision")
    t.add_argument("--yes", default=" Yes", help="self-check: the affirmative token (one token of the tokenizer)")
    t.add_argument("--no", default=" No", help="self-check: the negative token (one token)")
    t.add_argument("--threshold", type=finite_float, default=0.5, help="a check score >= this stops the chain")
    t.add_argument("--verifier", action="append", default=[], metavar="NAME[=WEIGHT]",
                   help="a verifier for best-of-N and the sequential check (repeatable: weighted sum)")
    t.add_argument("--verifier-spec", action="append", default=[], metavar="NAME=YAML",
                   help="define a verifier, e.g. judge='{kind: model, folder: judges/small}' (repeatable)")
    t.add_argument("--num-problems", type=positive_int, default=100, help="problems evaluated (default 100)")
    t.add_argument("--problem-seed", type=seed_int, help="seed of the problems (default: the run's data.eval_seed, or 1)")
    t.add_argument("--samples", type=positive_int, default=16, help="n, completions per problem (default 16)")
    t.add_argument("--ks", type=positive_int, nargs="+", help="k values (default 1, 2, 4, ... n)")
    t.add_argument("--temperature", type=non_negative_float, default=1.0, help="sampling temperature (default 1; 0 = greedy)")
    t.add_argument("--top-p", type=probability, default=1.0, help="nucleus mass (default 1 = off)")
    t.add_argument("--max-new-tokens", type=positive_int, help="longest response (default: the task's)")
    t.add_argument("--batch-size", type=positive_int, default=128, help="sequences per generate() call (default 128)")
    t.add_argument("--rule", default=None, choices=["first", "last", "strict"],
                   help="which candidate answer counts: first, last, or strict (Nautile: >1 distinct = wrong); "
                        "default: the extractor's (boxed, last_number: last) or first")
    t.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples of the problems (default 1000)")
    t.set_defaults(run=f"{__name__}:tts")
    return t


def _tts_problems(args, model):
    """(task, problems, description) for the tts command (see the module docstring)."""
    from assocmem.training.text_files import load_tokenizer
    from assocmem.training.verifiable import Modular, TextAnswers, VerifiableTask, get_task

    n = args.num_problems
    if args.task_param and not args.task:
        raise ValueError(f"--task-param {args.task_param[0]} sets a parameter of --task, which is not given (a run "
                         f"folder's own task keeps the parameters it was trained with); add --task NAME")
    if args.problems_file:
        task = TextAnswers(args.problems_file, tokenizer=load_tokenizer(args.tokenizer), prompt_field=args.prompt_field,
                           answer_field=args.answer_field, prompt_template=args.prompt_template,
                           max_new_tokens=args.max_new_tokens or 256, extractor=args.extractor,
                           reference_extractor=args.reference_extractor, metadata_fields=args.metadata_field,
                           chat_template=args.chat_template, system_prompt=args.system_prompt)
        return task, task.problems(min(n, len(task.problems()))), {"problems_file": args.problems_file}
    if args.task:
        task = get_task(args.task, **_params(args.task_param))
        seed = 1 if args.problem_seed is None else args.problem_seed
        return task, task.problems(n, seed=seed), {"task": args.task, **task.model_dump(), "problem_seed": seed}
    data = _run_data(args.model)
    if data is None:
        raise ValueError(f"{args.model} is not a run folder (no config.yaml): name the problems with --task or "
                         f"--problems-file")
    if not isinstance(data, VerifiableTask):
        raise ValueError(f"the run was trained on data.kind={data.kind!r}, which has no checker; give --task "
                         f"(chain_sum, graph_path, modular, needle) or --problems-file")
    if isinstance(data, Modular):
        return data, data.split(data.seed)[1][:n], {"task": "modular", **data.model_dump(), "split": "test"}
    seed = data.eval_seed if args.problem_seed is None else args.problem_seed
    return data, data.problems(n, seed=seed), {"task": data.kind, **data.model_dump(), "problem_seed": seed}


def _verifier(args):
    """The --verifier weights over registered rewards and --verifier-spec definitions (None without --verifier)."""
    from pydantic import TypeAdapter, ValidationError

    from assocmem.mixers.yaml_text import load_yaml
    from assocmem.training.rl.rewards import reward_fn
    from assocmem.training.verifiable.verifiers import VerifierSpec

    defined = {}
    for item in args.verifier_spec:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--verifier-spec expects NAME=YAML (e.g. judge='{{kind: model, folder: J}}'), got {item!r}")
        try:
            spec = TypeAdapter(VerifierSpec).validate_python(load_yaml(raw, source=f"--verifier-spec {name}"))
        except ValidationError as err:
            raise ValueError(f"--verifier-spec {name.strip()}: not a verifier (kinds exact_match, numeric, python, "
                             f"model): {err}") from None
        try:
            defined[name.strip()] = spec.load()  # its module or model read now: refused before --out is written
        except ValueError as err:
            raise ValueError(f"--verifier-spec {name.strip()}: {err}") from None
    weights = {}
    for item in args.verifier:
        name, sep, weight = item.partition("=")
        if not name.strip():
            raise ValueError(f"--verifier expects NAME or NAME=WEIGHT (e.g. judge=0.5), got {item!r}")
        try:
            weights[name.strip()] = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"--verifier expects NAME or NAME=WEIGHT with a number (e.g. judge=0.5), got {item!r}") from None
    if not weights:
        if defined:
            raise ValueError(f"--verifier-spec defines {sorted(defined)} but no --verifier NAME uses it")
        return None
    return reward_fn(weights, defined)


def _sequential_checks(args, task, verifier) -> tuple[int, int]:
    """The self-check's (yes id, no id) ((0, 0) with --check verifier), after refusing the flags sequential rounds
    cannot run with; called before --out is written."""
    from assocmem.training.verifiable import TextAnswers
    from assocmem.training.verifiable.judge import single_token

    if not isinstance(task, TextAnswers):
        raise ValueError("--mode sequential/both needs --problems-file: the revision and verify prompts are text")
    if args.check == "verifier":
        if verifier is None:
            raise ValueError("--check verifier needs a verifier: add --verifier NAME (e.g. --verifier correct), or "
                             "use --check self")
        return 0, 0
    if not 0 <= args.threshold <= 1:
        raise ValueError(f"--threshold {args.threshold}: the self-check score p(yes)/(p(yes)+p(no)) lies in [0, 1], so "
                         f"the chains would {'never' if args.threshold > 1 else 'all'} stop; give a threshold in [0, 1]")
    if args.yes == args.no:
        raise ValueError(f"--yes and --no are the same text {args.yes!r}; the self-check compares two tokens")
    return single_token(task.tokenizer, args.yes, "--yes"), single_token(task.tokenizer, args.no, "--no")


def _sequential(args, model, task, problems, settings, verifier, yes_no: tuple[int, int]) -> dict:
    from assocmem.probes.sequential_tts import HFPolicy, run_sequential
    from assocmem.training.text_files import encode_text

    tok = task.tokenizer
    policy = HFPolicy(model, settings, task.eos_id, task.pad_id, *yes_no)
    return run_sequential(policy, task, problems, chains=args.chains, rounds=args.rounds, check=args.check,
                          revise_ids=encode_text(tok, args.revise_prompt), verify_ids=encode_text(tok, args.verify_prompt),
                          verifier=verifier, threshold=args.threshold, seed=args.seed, rule=args.rule)


def _tts(args) -> Path:
    import json

    from assocmem.training.generation import SamplingSettings

    from assocmem.probes import io as probe_io
    from assocmem.probes.test_time_scaling import run_tts, save_equal_compute_figure, save_samples, save_tts_figure
    from assocmem.training.progress import progress_line

    if args.ks and max(args.ks) > args.samples:
        raise ValueError(f"--ks {max(args.ks)} > --samples {args.samples}: k cannot exceed the samples per problem")
    model, info = probe_io.load_model(args.model)
    task, problems, where = _tts_problems(args, model)
    _check_vocab(model, task.vocab_size)
    verifier = _verifier(args)
    yes_no = _sequential_checks(args, task, verifier) if args.mode in ("sequential", "both") else None
    out = probe_io.prepare_out(args.out, args.overwrite)
    settings = SamplingSettings(num_samples=args.samples, temperature=args.temperature, top_p=args.top_p,
                                max_new_tokens=args.max_new_tokens or task.max_new_tokens,
                                batch_size=args.batch_size, seed=args.seed)
    title = f"{Path(args.model).name}: {where.get('task', 'problems file')}"
    report, sequential = {}, None
    if args.mode in ("parallel", "both"):
        report = run_tts(model, task, problems, settings, ks=args.ks, rule=args.rule, num_resamples=args.bootstrap,
                         verifier=verifier, report=progress_line("tts"))
        save_samples(report, out / "samples.jsonl")
        save_tts_figure(report, out / "tts.png", title=title)
    if args.mode in ("sequential", "both"):
        sequential = _sequential(args, model, task, problems, settings, verifier, yes_no)
        (out / "sequential.jsonl").write_text("".join(json.dumps(c) + "\n" for c in sequential.pop("chains_detail")))
        save_equal_compute_figure(report or None, sequential, out / "equal_compute.png", title=title)
    probe_io.write_json(out, "tts", {**info, "problems": where, "mode": args.mode,
                                     **{k: v for k, v in report.items() if k != "samples"},
                                     **({"sequential": sequential} if sequential is not None else {})})
    return out


# ------------------------------------------------------------------ niah
def _niah_parser(sub) -> argparse.ArgumentParser:
    n = sub.add_parser("niah", help="needle in a haystack: accuracy over context length × depth (heat map)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    n.add_argument("model", help="saved model folder or run folder")
    n.add_argument("--text", help="a local text file as the haystack (instead of random ids)")
    n.add_argument("--tokenizer", default="bytes", help="for --text: 'bytes' or a local HF tokenizer folder")
    n.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE",
                   help="needle layout parameters (num_needles, num_filler, num_keys, num_values)")
    n.add_argument("--lengths", type=positive_int, nargs="+", default=[128, 256, 512, 1024, 2048],
                   help="context lengths (default 128 256 512 1024 2048)")
    n.add_argument("--depths", type=finite_float, nargs="+", default=[0, 25, 50, 75, 100],
                   help="needle depths in %% of the haystack (default 0 25 50 75 100)")
    n.add_argument("--trials", type=positive_int, default=16, help="cases per cell (default 16)")
    n.add_argument("--batch-size", type=positive_int, default=16, help="cases per forward (default 16)")
    n.add_argument("--train-length", type=positive_int, help="training length to mark (default: the run's data.seq_len)")
    n.set_defaults(run=f"{__name__}:niah")
    return n


def _niah_source(args):
    from assocmem.training.text_files import check_data_file, load_tokenizer
    from assocmem.training.verifiable import Needle, get_task

    from assocmem.probes.niah import TextNeedle

    data = _run_data(args.model)
    train_length = args.train_length or (getattr(data, "seq_len", None) if data is not None else None)
    if args.text:
        if not Path(args.text).is_file():
            raise ValueError(f"--text {args.text} is not a file")
        check_data_file(Path(args.text), "text")  # empty, binary or not UTF-8: named with its line
        return TextNeedle(args.text, load_tokenizer(args.tokenizer)), train_length
    if isinstance(data, Needle) and not args.task_param:
        return data, train_length
    return get_task("needle", **_params(args.task_param)), train_length


def _niah(args) -> Path:
    from assocmem.probes import io as probe_io
    from assocmem.probes.niah import niah_grid, save_niah_figure
    from assocmem.training.progress import progress_line

    bad = [d for d in args.depths if not 0 <= d <= 100]
    if bad:
        raise ValueError(f"--depths are percentages in [0, 100], got {bad}")
    model, info = probe_io.load_model(args.model)
    source, train_length = _niah_source(args)
    _check_vocab(model, getattr(source, "vocab_size", 0))
    out = probe_io.prepare_out(args.out, args.overwrite)
    report = niah_grid(model, source, lengths=args.lengths, depths=[d / 100 for d in args.depths], trials=args.trials,
                       seed=args.seed, batch_size=args.batch_size, train_length=train_length,
                       report=progress_line("niah"))
    save_niah_figure(report, out / "niah.png", title=f"{Path(args.model).name}: needle retrieval")
    probe_io.write_json(out, "niah", {**info, "haystack": "text" if args.text else "random ids", **report})
    return out
