"""Evaluate a trained run: ``evaluate_run(run_dir)`` behind ``assocmem eval RUN_DIR``.

The model is rebuilt from the run's config.yaml (its vocabulary from the
run's training data), the checkpoint's safetensors weights are loaded, and
loss / perplexity / accuracy on supervised positions are computed on the
run's eval set, or on another ``data:`` section (``--data``, ``--set``).

On a problem set (``data.kind: problems``, or ``--problems FILE``: the whole file, read with the run's
tokenizer) the held-out problems are also answered greedily and graded by answer extraction
(``answer_accuracy``): the fraction answered correctly and the fraction that state an answer.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import checkpoint as ckpt
from .config import ConfigError, apply_overrides, config_from_dict
from .config_files import read_yaml
from .data import build_datasets, data_vocab_size
from .distributed import init_distributed, shutdown
from .generation import SamplingSettings, sample_completions
from .metrics import evaluate
from .model_factory import build_from_config
from .objective import CausalLMObjective
from .runlog import CONFIG_FILE
from .verifiable import ProblemsFile, problem_sets, score_response


def data_section(path: str | Path) -> dict:
    """The `data:` section of a YAML file (or the file itself when it is only that section)."""
    if not Path(path).is_file():
        raise ConfigError(f"--data {path}: no such file")
    text = read_yaml(path)
    if not isinstance(text, dict):
        raise ConfigError(f"{path}: expected a mapping with a data section")
    return text["data"] if "data" in text else text


def problems_section(path: str | Path, trained_data) -> dict:
    """A ``data:`` section that evaluates on the whole problem file ``path`` with the run's tokenizer; a run
    trained on a problem file also lends its fields, extractors and prompt format (the prompts it learnt)."""
    section = {"kind": "problems", "tokenizer": getattr(trained_data, "tokenizer", "bytes")}
    if isinstance(trained_data, ProblemsFile):
        section = trained_data.model_dump(mode="json", exclude={"num_train", "num_eval"})
    return {**section, "kind": "problems", "path": str(path), "eval_path": str(path)}


def answer_accuracy(model, task, problems, *, batch_size: int) -> dict:
    """Greedy responses to ``problems``, graded under the task's rule: accuracy and answered fraction."""
    settings = SamplingSettings(num_samples=1, temperature=0.0, max_new_tokens=task.max_new_tokens,
                                batch_size=batch_size)
    out = sample_completions(model, [p.prompt for p in problems], settings, eos_token_id=task.eos_id,
                             pad_token_id=task.pad_id)
    graded = [score_response(task, p, rows[0]) for p, rows in zip(problems, out.responses)]
    return {"answer_accuracy": float(np.mean([ok for _, ok in graded])),
            "answered": float(np.mean([a is not None for a, _ in graded])), "num_problems": len(problems)}


def evaluate_run(run_dir: str | Path, *, data: str | Path | None = None, overrides: list[str] | None = None,
                 checkpoint: str | Path | None = None, batch_size: int | None = None,
                 problems: str | Path | None = None) -> dict:
    """Metrics of a run's checkpoint (default: the newest that verifies) on its eval data or on ``data``.

    The checkpoint is verified (``checkpoint.verify_checkpoint``) and its state read before any
    work, so a damaged one fails at once; batch_size must be None or >= 1.
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"--batch-size must be a positive number of sequences, got {batch_size!r}")
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no {CONFIG_FILE})")
    trained = config_from_dict(read_yaml(config_path))
    raw = trained.model_dump(mode="json")
    if data is not None and problems is not None:
        raise ValueError("give --data or --problems, not both")
    if data is not None:
        raw["data"] = data_section(data)
    if problems is not None:
        raw["data"] = problems_section(problems, trained.data)
    cfg = config_from_dict(apply_overrides(raw, overrides or []))
    path = ckpt.verify_checkpoint(checkpoint) if checkpoint is not None else ckpt.latest_valid_checkpoint(run_dir)
    if path is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint (looked in {ckpt.checkpoint_dir(run_dir)})")
    state = ckpt.load_state(path)
    _, eval_ds, vocab = build_datasets(cfg.data)
    if eval_ds is None:
        raise ValueError("the data has no evaluation set (num_eval = 0 or no eval_files/eval_fraction); "
                         "pass --data or --set data.num_eval=...")
    model_vocab = data_vocab_size(trained.data)
    if vocab > model_vocab:
        raise ValueError(f"the evaluation data uses {vocab} token ids but the model was trained with {model_vocab}")
    info = init_distributed(cfg.train.device)
    try:
        torch.manual_seed(cfg.seed)
        model = build_from_config(trained.model, vocab_size=model_vocab)
        ckpt.load_weights(path, model)
        model.to(info.device)
        metrics = evaluate(CausalLMObjective(model, cfg.train.logits), eval_ds, info=info,
                           batch_size=batch_size or cfg.train.eval_batch_size, precision=cfg.train.precision)
        if isinstance(cfg.data, ProblemsFile) and info.is_main:
            metrics.update(answer_accuracy(model, cfg.data, problem_sets(cfg.data)[1],
                                           batch_size=batch_size or cfg.train.eval_batch_size))
    finally:
        shutdown()
    return {"run": str(run_dir), "checkpoint": str(path), "step": state["step"], "num_sequences": len(eval_ds),
            **metrics}
