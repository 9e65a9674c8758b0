"""Tiny RL configs shared by the RL loop tests (imported as a plain module)."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PYTHON = sys.executable

BASE = {
    "seed": 0,
    "model": {"hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}},
    "data": {"kind": "chain_sum", "num_digits": 3, "num_train": 64, "num_eval": 8},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "reward": "states_an_answer"},
    "loss": {"algorithm": "balanced", "beta": 0.04, "inner_iterations": 2},
    "optim": {"lr": 3e-3, "weight_decay": 0.0},
    "train": {"steps": 4, "progress": False, "threads": 1, "eval_samples": 2},
}


def merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def write_config(tmp_path: Path, name: str, update: dict | None = None) -> Path:
    data = merge(BASE, {"output_dir": str(tmp_path / "runs"), **(update or {})})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
