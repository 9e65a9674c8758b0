"""Evaluate a trained run: ``evaluate_run(run_dir)`` behind ``assocmem eval RUN_DIR``.

The model is rebuilt from the run's config.yaml (its vocabulary from the
run's training data), the checkpoint's safetensors weights are loaded, and
loss / perplexity / accuracy on supervised positions are computed on the
run's eval set, or on another ``data:`` section (``--data``, ``--set``).
"""
from __future__ import annotations

from pathlib import Path

import torch
import yaml

from . import checkpoint as ckpt
from .config import ConfigError, apply_overrides, config_from_dict
from .data import build_datasets, data_vocab_size
from .distributed import init_distributed, shutdown
from .metrics import evaluate
from .model_factory import build_from_config
from .objective import CausalLMObjective
from .runlog import CONFIG_FILE


def data_section(path: str | Path) -> dict:
    """The `data:` section of a YAML file (or the file itself when it is only that section)."""
    text = yaml.safe_load(Path(path).read_text())
    if not isinstance(text, dict):
        raise ConfigError(f"{path}: expected a mapping with a data section")
    return text["data"] if "data" in text else text


def evaluate_run(run_dir: str | Path, *, data: str | Path | None = None, overrides: list[str] | None = None,
                 checkpoint: str | Path | None = None, batch_size: int | None = None) -> dict:
    """Metrics of a run's checkpoint (default: latest) on its eval data or on ``data``."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no {CONFIG_FILE})")
    trained = config_from_dict(yaml.safe_load(config_path.read_text()))
    raw = trained.model_dump(mode="json")
    if data is not None:
        raw["data"] = data_section(data)
    cfg = config_from_dict(apply_overrides(raw, overrides or []))
    path = Path(checkpoint) if checkpoint is not None else ckpt.latest_checkpoint(run_dir)
    if path is None or not (path / ckpt.WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"no checkpoint found (looked for {path or run_dir / 'checkpoints'})")
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
    finally:
        shutdown()
    state = ckpt.load_state(path)
    return {"run": str(run_dir), "checkpoint": str(path), "step": state["step"], "num_sequences": len(eval_ds),
            **metrics}
