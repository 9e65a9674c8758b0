"""The text pipeline end to end at toy scale: pre-training on a corpus, SFT on a problem file, RL with
a verifiable reward, then parallel (pass@k, maj@k, best-of-N) and sequential (check, revise) test-time
scaling; a GDN + attention hybrid beside an attention baseline (Nautile-370M §3–4; thesis §3.5).

The data ship with the package (text_demo_data/, written by its make_data.py, licence-clean): 400
word problems with GSM8K-style worked solutions ("3 + 4 = 7" per step, last line "#### 7") and 100
revision records (question, a wrong solution, "That is wrong. Try again.", the right solution), 50
held-out problems, and a 58 KB prose corpus of the same small world. Byte-level tokenizer (257 ids),
no download. Per seed and model (``models``: label -> layer pattern):

  1. with ``--pretrain-steps N`` (default 0): pre-train on corpus.txt (``kind: files``, one paragraph per
     document);
  2. SFT (from it) on train.jsonl (``kind: problems``, extractor gsm8k, loss on the solution);
  3. RL from the SFT model (``assocmem rl``'s loop: Dr. GRPO, A = r − mean, dapo aggregation, reward
     ``correct``: the #### answer equals the reference) on the 400 plain problems;
  4. for the SFT and the RL model, on the 50 held-out problems:
       greedy accuracy                          (``answer_accuracy``, ``assocmem eval --problems``)
       parallel: n samples at temperature 1     pass@k, maj@k, best-of-N by the step verifier, per k,
                                                 tokens = k × mean response length (``run_tts``)
       sequential: ``chains`` chains, ``revisions`` rounds: the step verifier (check_steps.py, a
                 ``python`` verifier that reads the solution's arithmetic, never the reference)
                 accepts or rejects; a rejected chain gets the question, its solution and the
                 revision prompt, and answers again (``run_sequential``); accuracy and tokens per round.

    assocmem experiment text-demo --out /tmp/text-demo --seeds 0 1 2
    assocmem experiment text-demo --out /tmp/text-demo-quick --quick     # seconds
"""
from __future__ import annotations

import importlib.util
import time
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from assocmem.cli.types import non_negative_int, positive_float

from .frame import Experiment, config_from_flags, run_seeds, seeded_run, spread

STAGES = ("SFT", "RL")


def data_folder() -> Path:
    """The shipped data (text_demo_data/ beside this module)."""
    return Path(str(files(__package__).joinpath("text_demo_data")))


@lru_cache(maxsize=1)
def make_data():
    """text_demo_data/make_data.py as a module (its constants and ``generate``)."""
    path = data_folder() / "make_data.py"
    spec = importlib.util.spec_from_file_location("assocmem_text_demo_make_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TextDemoConfig(BaseModel):
    """Sizes and budgets of the demonstration."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    models: dict[str, str] = Field({"gdn+attn": "gdn,attn", "attn×2": "attn,attn"},
                                   description="label -> layer pattern")
    d_model: int = Field(64, gt=0, description="residual width")
    num_heads: int = Field(4, gt=0, description="heads of every mixer")
    mlp_ratio: float = Field(2.0, ge=0, description="SwiGLU width / d_model")
    pretrain_steps: int = Field(0, ge=0, description="pre-training steps on corpus.txt before SFT (0: none)")
    pretrain_seq_len: int = Field(96, ge=2, description="pre-training block length")
    sft_steps: int = Field(400, gt=0, description="SFT steps")
    batch_size: int = Field(16, gt=0, description="sequences per pre-training and SFT step")
    lr: float = Field(5e-3, gt=0, description="peak learning rate of pre-training and SFT (warm-up 10 %, cosine)")
    rounds: int = Field(30, gt=0, description="RL rounds")
    prompts: int = Field(8, gt=0, description="RL prompts per round")
    group_size: int = Field(8, ge=2, description="G, RL samples per prompt")
    rl_lr: float = Field(3e-4, gt=0, description="RL learning rate (constant; AdamW, no weight decay)")
    samples: int = Field(8, gt=0, description="n, parallel samples per held-out problem")
    chains: int = Field(4, gt=0, description="sequential chains per held-out problem")
    revisions: int = Field(3, ge=0, description="sequential rounds after the first answer")
    num_problems: int = Field(50, gt=0, description="held-out problems (the first ones of test.jsonl)")
    threads: int | None = Field(1, gt=0, description="torch threads")

    @classmethod
    def quick(cls) -> "TextDemoConfig":
        return cls(d_model=32, num_heads=2, pretrain_steps=4, sft_steps=6, batch_size=8, rounds=2, prompts=2,
                   group_size=2, samples=2, chains=1, revisions=1, num_problems=4)


def problems_section(num_train: int | None = None) -> dict:
    """The ``data:`` section of the problem file (train.jsonl, held out: test.jsonl)."""
    folder = data_folder()
    return {"kind": "problems", "path": str(folder / "train.jsonl"), "eval_path": str(folder / "test.jsonl"),
            "extractor": "gsm8k", "prompt_template": "{prompt}\n", "tokenizer": "bytes",
            "max_new_tokens": max_response_tokens(), "num_train": num_train}


@lru_cache(maxsize=1)
def max_response_tokens() -> int:
    """The longest reference solution in bytes, plus EOS and a margin of 8 (the response budget)."""
    import json

    records = [json.loads(line) for name in ("train.jsonl", "test.jsonl")
               for line in (data_folder() / name).read_text().splitlines()]
    return max(len(r["answer"].encode()) for r in records) + 1 + 8


def step_verifier():
    """check_steps.py's ``grade`` as a ``python`` verifier (verifiers.py)."""
    from assocmem.training.verifiable.verifiers import PythonChecker

    return PythonChecker(function="check_steps:grade", path=str(data_folder()))


def _train(cfg: TextDemoConfig, runs: Path, name: str, model: dict, data: dict, steps: int, seed: int) -> Path:
    """One ``assocmem train`` run (warm-up 10 %, cosine, AdamW wd 0.1); its folder."""
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train

    train(config_from_dict({
        "name": name, "output_dir": str(runs), "seed": seed, "model": model, "data": data,
        "optim": {"lr": cfg.lr, "weight_decay": 0.1, "warmup_steps": max(1, steps // 10)},
        "train": {"steps": steps, "batch_size": cfg.batch_size, "progress": False, "threads": cfg.threads,
                  "log_every": max(1, steps // 10)}}), overwrite=True)
    return runs / name


def train_stages(cfg: TextDemoConfig, label: str, runs: Path, seed: int) -> dict[str, Path]:
    """Steps 1–3 for the model ``label``: stage -> run folder."""
    from assocmem.training.rl.config import rl_config_from_dict
    from assocmem.training.rl.loop import train_rl

    model = {"hybrid": {"d_model": cfg.d_model, "layers": cfg.models[label], "num_heads": cfg.num_heads,
                        "mlp_ratio": cfg.mlp_ratio, "vocab_size": 257}}
    stem = label.replace("×", "x").replace("+", "_")
    folders = {}
    if cfg.pretrain_steps:
        corpus = {"kind": "files", "train_files": [str(data_folder() / "corpus.txt")], "sample_by": "paragraph",
                  "seq_len": cfg.pretrain_seq_len, "tokenizer": "bytes"}
        folders["pretrain"] = _train(cfg, runs, f"{stem}-pretrain", model, corpus, cfg.pretrain_steps, seed)
        model = {"init_from": str(folders["pretrain"])}
    folders["SFT"] = _train(cfg, runs, f"{stem}-sft", model, problems_section(), cfg.sft_steps, seed)
    rl = rl_config_from_dict({
        "name": f"{stem}-rl", "output_dir": str(runs), "seed": seed, "model": {"init_from": str(folders["SFT"])},
        "data": problems_section(num_train=make_data().NUM_TRAIN),
        "rollout": {"group_size": cfg.group_size, "prompts_per_step": cfg.prompts, "temperature": 1.0,
                    "reward": "correct", "advantage_scale": "none"},
        "loss": {"algorithm": "policy_gradient", "aggregation": "dapo"},
        "optim": {"lr": cfg.rl_lr, "weight_decay": 0.0, "warmup_steps": 0, "min_lr_ratio": 1.0, "grad_clip": 1.0},
        "train": {"steps": cfg.rounds, "eval_samples": 1, "progress": False, "threads": cfg.threads,
                  "eval_batch_size": 256}})
    train_rl(rl, overwrite=True)
    folders["RL"] = runs / rl.name
    return folders


def evaluate_model(model, cfg: TextDemoConfig, seed: int) -> dict:
    """Step 4 for one model: greedy accuracy, the parallel report and the sequential report."""
    from assocmem.training.config import ProblemsData
    from assocmem.training.evaluate import answer_accuracy
    from assocmem.training.generation import SamplingSettings
    from assocmem.training.text_files import encode_text

    from ..sequential_tts import HFPolicy, run_sequential
    from ..test_time_scaling import run_tts

    data = ProblemsData(**problems_section())
    problems = data.split()[1][:cfg.num_problems]
    greedy = answer_accuracy(model, data, problems, batch_size=256)
    settings = SamplingSettings(num_samples=cfg.samples, temperature=1.0, max_new_tokens=data.max_new_tokens,
                                batch_size=256, seed=seed)
    parallel = run_tts(model, data, problems, settings, ks=list(range(1, cfg.samples + 1)), num_resamples=200,
                       verifier=step_verifier())
    parallel.pop("samples")
    tok = data.task.tokenizer
    policy = HFPolicy(model, settings.model_copy(update={"num_samples": 1}), data.eos_id, data.pad_id,
                      yes_id=ord("Y"), no_id=ord("N"))
    sequential = run_sequential(policy, data, problems, chains=cfg.chains, rounds=cfg.revisions, check="verifier",
                                verifier=step_verifier(), seed=seed,
                                revise_ids=encode_text(tok, make_data().REVISE + "\n"))
    sequential.pop("chains_detail")
    sequential.pop("per_problem_accuracy")
    return {"greedy": greedy["answer_accuracy"], "answered": greedy["answered"], "parallel": parallel,
            "sequential": sequential}


def run_seed(cfg: TextDemoConfig, seed: int, out: Path) -> dict:
    """Every model through every stage, evaluated after SFT and after RL."""
    import json

    from assocmem.training.model_factory import load_pretrained

    results = {}
    for label in cfg.models:
        start = time.time()
        folders = train_stages(cfg, label, out / "runs", seed)
        results[label] = {stage: evaluate_model(load_pretrained(folders[stage]), cfg, seed) for stage in STAGES}
        results[label]["minutes"] = (time.time() - start) / 60
    (out / "reports.json").write_text(json.dumps(results, indent=1))
    return results


def headline(r: dict, cfg: TextDemoConfig) -> dict[str, float]:
    """The flat numbers of one model at one stage."""
    n, m = cfg.samples, r["parallel"]["metrics"]
    row = {"greedy": r["greedy"], "pass@1": m["pass@k"]["mean"][0], f"pass@{n}": m["pass@k"]["mean"][-1],
           f"maj@{n}": m["maj@k (random k)"]["mean"][-1],
           f"best-of-{n} verifier": m["best-of-N@k (verifier)"]["mean"][-1],
           f"tokens@{n}": r["parallel"]["tokens"][-1]}
    for i, (acc, tokens) in enumerate(zip(r["sequential"]["accuracy"], r["sequential"]["tokens"])):
        row[f"sequential round {i}"] = acc
        row[f"sequential tokens {i}"] = tokens
    return row


def seed_metrics(per_seed: dict, cfg: TextDemoConfig) -> dict[int, dict[str, float]]:
    """seed -> "<model> <stage> <metric>" -> value: the flat numbers of the result record."""
    return {seed: {f"{label} {stage} {key}": value for label in cfg.models for stage in STAGES
                   for key, value in headline(results[label][stage], cfg).items()}
            for seed, results in per_seed.items()}


def summarize(per_seed: dict, cfg: TextDemoConfig) -> dict:
    """Mean and range over seeds of every flat number, and of the curves (parallel per k, sequential per round)."""
    flat = seed_metrics(per_seed, cfg)
    keys = next(iter(flat.values()))
    curves = {}
    for label in cfg.models:
        for stage in STAGES:
            runs = [per_seed[s][label][stage] for s in per_seed]
            ks, rounds = range(cfg.samples), range(cfg.revisions + 1)
            curves[f"{label} {stage}"] = {
                "tokens@k": [spread(r["parallel"]["tokens"][k] for r in runs) for k in ks],
                **{metric: [spread(r["parallel"]["metrics"][metric]["mean"][k] for r in runs) for k in ks]
                   for metric in ("pass@k", "maj@k (random k)", "best-of-N@k (verifier)")},
                "sequential accuracy": [spread(r["sequential"]["accuracy"][i] for r in runs) for i in rounds],
                "sequential tokens": [spread(r["sequential"]["tokens"][i] for r in runs) for i in rounds]}
    return {"metrics": {key: spread(row[key] for row in flat.values()) for key in keys}, "curves": curves}


def _cell(s: dict | None) -> str:
    return "–" if s is None else f"{s['mean']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


def markdown_table(summary: dict, cfg: TextDemoConfig) -> str:
    """One row per model and stage: greedy, pass@1, pass@n, maj@n, best-of-n; then sequential per round."""
    n, m = cfg.samples, summary["metrics"]
    columns = ["greedy", "pass@1", f"pass@{n}", f"maj@{n}", f"best-of-{n} verifier"]
    lines = ["| model | stage | " + " | ".join(columns) + f" | tokens@{n} |", "|---|---|" + "---|" * (len(columns) + 1)]
    for label in cfg.models:
        for stage in STAGES:
            key = f"{label} {stage}"
            lines.append(f"| {label} | {stage} | " + " | ".join(_cell(m[f"{key} {c}"]) for c in columns)
                         + f" | {m[f'{key} tokens@{n}']['mean']:.0f} |")
    rounds = range(cfg.revisions + 1)
    lines += ["", "| sequential (step verifier) | " + " | ".join(f"round {i}" for i in rounds) + " |",
              "|---|" + "---|" * len(rounds)]
    for label in cfg.models:
        for stage in STAGES:
            key = f"{label} {stage}"
            lines.append(f"| {key}: accuracy | " + " | ".join(_cell(m[f"{key} sequential round {i}"]) for i in rounds)
                         + " |")
            lines.append(f"| {key}: tokens | " + " | ".join(f"{m[f'{key} sequential tokens {i}']['mean']:.1f}"
                                                           for i in rounds) + " |")
    return "\n".join(lines) + "\n"


def save_figure(summary: dict, cfg: TextDemoConfig, path: Path) -> Path:
    """Accuracy against tokens generated per problem (mean over seeds): pass@k, maj@k, best-of-N by the
    verifier and the sequential rounds, one panel per model after RL and after SFT."""
    from ..plotting import CurvePanel, save_curve_panels

    panels = []
    for key, c in summary["curves"].items():
        tokens = [s["mean"] for s in c["tokens@k"]]
        series = {metric: (tokens, [s["mean"] for s in c[metric]])
                  for metric in ("pass@k", "maj@k (random k)", "best-of-N@k (verifier)")}
        series["sequential (verifier check, revise)"] = ([s["mean"] for s in c["sequential tokens"]],
                                                         [s["mean"] for s in c["sequential accuracy"]])
        panels.append(CurvePanel(key, "tokens generated per problem", "accuracy", series, logx_base=2))
    return save_curve_panels(path, panels, ncols=len(STAGES))


def run_experiment(cfg: TextDemoConfig, seeds: list[int], out: str | Path) -> dict:
    """Every seed into ``out/seed_<s>/``, then text_demo_experiment.{json,md,png} in ``out``."""
    return run_seeds("text_demo", cfg, seeds, out, run_seed=run_seed, summarize=summarize,
                     markdown_table=markdown_table,
                     save_figures=lambda summary, cfg, out: save_figure(summary, cfg, out / "text_demo_experiment.png"))


run = seeded_run(run_experiment, markdown_table, seed_metrics,
                 lambda cfg: "the text pipeline at toy scale (probes/experiments/text_demo.py): byte-level "
                             f"{' / '.join(cfg.models)} d={cfg.d_model}, pre-trained on the shipped corpus, SFT on "
                             "the shipped word problems, RL (Dr. GRPO, reward correct); greedy, pass@k, maj@k, "
                             "best-of-N by a step verifier and sequential verify-revise rounds on 50 held-out problems",
                 lambda summary: {"curves": summary["curves"]})


def add_flags(flags) -> None:
    """--pretrain-steps and --rl-lr: fields of ``TextDemoConfig``."""
    flags.add("--pretrain-steps", type=non_negative_int, default=None,
              help="pre-training steps on the shipped corpus before SFT (default 0: SFT from scratch; "
                   "--quick: 4)")
    flags.add("--rl-lr", type=positive_float, default=None,
              help=f"RL learning rate (default {TextDemoConfig().rl_lr:g})")


def config(args) -> TextDemoConfig:
    """The config of --quick, --threads, --pretrain-steps and --rl-lr (refused before any work)."""
    given = {"pretrain_steps": args.pretrain_steps, "rl_lr": args.rl_lr}
    return config_from_flags(TextDemoConfig, args, {k: v for k, v in given.items() if v is not None})


EXPERIMENT = Experiment("text-demo", help="the text pipeline at toy scale: corpus pre-training, SFT, RL, pass@k / "
                        "maj@k / sequential scaling for a GDN hybrid and attention", doc=__doc__, run=run,
                        flags=add_flags, settings=config, seeds=(0, 1, 2), threads=True)
