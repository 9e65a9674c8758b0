"""Tiny run configs shared by the training tests (imported as a plain module: tests have no packages)."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

TINY_LLAMA = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64}

BASE = {
    "seed": 0,
    "model": {"hf_config": TINY_LLAMA},
    "data": {"kind": "mqar", "seq_len": 32, "num_kv_pairs": 4, "vocab_size": 64, "num_train": 256, "num_eval": 32},
    "optim": {"lr": 3e-3, "warmup_steps": 2},
    "train": {"steps": 12, "batch_size": 8, "log_every": 1, "progress": False, "threads": 1, "eval_batch_size": 32},
}


def merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
