"""Associative recall (MQAR, Zoology: Arora et al. 2023) against key-value pairs and state size.

- ``mqar_accuracy(model, ...)``: fraction of query positions whose arg-max next-token
  prediction is the stored value (HF-aligned labels from ``training.tasks.mqar_arrays``).
- ``model_state_size(model, seq_len)``: floats held per sequence by every mixer after
  ``seq_len`` tokens (Σ ``state_size()``; attention's KV cache grows with seq_len), the
  x axis of Zoology's recall-vs-state figure. Plain HF transformers: their KV cache.
- ``recall_vs_pairs``: accuracy of several models at several numbers of pairs K.
- ``train_mqar_models``: Zoology-style tiny models (2 layers, no MLP) for each mixer and
  width, trained with the project's training loop (``assocmem.training.loop.train``).
- ``save_recall_figures``: recall vs state size (log x, one line per mixer, one panel per
  (L, K)) and recall vs K (one line per model).
"""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from assocmem.training.progress import progress
from assocmem.training.tasks import mqar_arrays

from .io import check_length
from .plotting import ACCURACY_LIMITS, CurvePanel, save_curve_panels


@dataclass
class RecallPoint:
    label: str  # model label
    mixer: str  # mixer / family label (one line per mixer in the state figure)
    state_size: int  # floats per sequence at seq_len
    seq_len: int
    num_kv_pairs: int
    accuracy: float

    def to_json(self) -> dict:
        return asdict(self)


@torch.no_grad()
def mqar_accuracy(model: torch.nn.Module, *, seq_len: int, num_kv_pairs: int, vocab_size: int,
                  num_examples: int = 256, batch_size: int = 32, seed: int = 123) -> float:
    """Arg-max accuracy at MQAR query positions (logits at t vs labels[t+1]) on fresh examples."""
    check_length(model, seq_len, "seq_len")
    inputs, labels = mqar_arrays(num_examples, seq_len, num_kv_pairs, vocab_size=vocab_size, seed=seed)
    model_vocab = int(model.config.vocab_size)
    if vocab_size > model_vocab:
        raise ValueError(f"vocab_size: MQAR uses {vocab_size} ids but the model has {model_vocab}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = total = 0
    try:
        for b0 in range(0, num_examples, batch_size):
            ids = torch.as_tensor(inputs[b0:b0 + batch_size], device=device)
            target = torch.as_tensor(labels[b0:b0 + batch_size, 1:], device=device)  # (B, T-1)
            pred = model(input_ids=ids).logits[:, :-1].argmax(-1)  # (B, T-1)
            mask = target != -100
            correct += int((pred[mask] == target[mask]).sum())
            total += int(mask.sum())
    finally:
        model.train(was_training)
    return correct / total


def model_state_size(model: torch.nn.Module, *, seq_len: int) -> int:
    """Floats per sequence held by the model's mixers after ``seq_len`` tokens (a module's own
    ``state_size`` wins over its submodules': a model's, a parallel layer's over its branches')."""
    total, found, counted = 0, False, []
    for name, module in model.named_modules():
        fn = getattr(module, "state_size", None)
        if not callable(fn) or any(name.startswith(c) for c in counted):
            continue
        found = True
        counted.append(f"{name}." if name else "")
        total += fn(seq_len) if "seq_len" in inspect.signature(fn).parameters else fn()
    if found:
        return int(total)
    cfg = model.config  # a transformers LM without assocmem mixers: its KV cache
    needed = ("num_hidden_layers", "num_attention_heads", "hidden_size")
    if not all(hasattr(cfg, k) for k in needed):
        raise TypeError(f"model: no mixer with state_size() and no {needed} in its config")
    kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return int(2 * cfg.num_hidden_layers * kv * head_dim * seq_len)


DEFAULT_KV_PAIRS = (2, 4, 8, 16)


def max_kv_pairs(seq_len: int, vocab_size: int) -> int:
    """The largest K an MQAR example of ``seq_len`` tokens over ``vocab_size`` ids holds: 4·K ≤ L (context
    2K plus K query slots of width 2) and K ≤ V/2 − 1 distinct key ids (training/tasks.py mqar_arrays)."""
    return min(seq_len // 4, vocab_size // 2 - 1)


def default_num_kv_pairs(seq_len: int, vocab_size: int, trained: tuple[int, ...] = ()) -> list[int]:
    """The K values ``probe recall`` evaluates when none are given: 2, 4, 8, 16 and the runs' own
    ``trained`` K, each that fits ``max_kv_pairs`` (just the largest that fits when none of them does)."""
    fits = max_kv_pairs(seq_len, vocab_size)
    if fits < 1:
        raise ValueError(f"seq_len {seq_len} / vocab_size {vocab_size} hold no MQAR example (need seq_len ≥ 4 "
                         f"and vocab_size ≥ 4)")
    return sorted(k for k in {*DEFAULT_KV_PAIRS, *trained} if k <= fits) or [fits]


def recall_vs_pairs(models: dict[str, torch.nn.Module], *, num_kv_pairs: list[int], seq_len: int, vocab_size: int,
                    mixer_of: dict[str, str] | None = None, num_examples: int = 256, seed: int = 123) -> list[RecallPoint]:
    """MQAR accuracy of every model at every K (same examples for every model)."""
    points = []
    for label, model in progress(models.items(), "recall: evaluating", label=lambda kv: kv[0]):
        state = model_state_size(model, seq_len=seq_len)
        for K in num_kv_pairs:
            acc = mqar_accuracy(model, seq_len=seq_len, num_kv_pairs=K, vocab_size=vocab_size,
                                num_examples=num_examples, seed=seed + K)
            points.append(RecallPoint(label, (mixer_of or {}).get(label, label), state, seq_len, K, acc))
    return points


def train_mqar_models(mixers: list[str], d_models: list[int], *, out_dir: str | Path, seq_len: int,
                      num_kv_pairs: int, vocab_size: int, steps: int, lr: float = 3e-3, batch_size: int = 32,
                      head_dim: int = 16, num_train: int = 4000, seed: int = 0) -> dict[str, tuple[str, torch.nn.Module]]:
    """Train 2-layer, MLP-free models (Zoology's MQAR setup) of each mixer at each width.

    Returns {label: (mixer, trained model)} with label "<mixer>-d<d_model>"; runs are
    written under ``out_dir`` by ``assocmem.training.loop.train``.
    """
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train
    from assocmem.models.hf_load import load_causal_lm

    models = {}
    for mixer, d in progress([(m, d) for m in mixers for d in d_models], "recall: training",
                             label=lambda md: f"{md[0]}-d{md[1]} ({steps} steps)"):
        label = f"{mixer}-d{d}"
        cfg = config_from_dict({
            "name": label, "output_dir": str(out_dir), "seed": seed,
            "model": {"hybrid": {"d_model": d, "layers": mixer, "n_layers": 2, "mlp_ratio": 0,
                                 "head_dim": min(head_dim, d), "vocab_size": vocab_size}},
            "data": {"kind": "mqar", "seq_len": seq_len, "num_kv_pairs": num_kv_pairs, "vocab_size": vocab_size,
                     "num_train": num_train, "num_eval": 0, "seed": seed, "eval_seed": seed + 1},
            "optim": {"lr": lr, "weight_decay": 0.1, "warmup_steps": max(1, steps // 10)},
            "train": {"steps": steps, "batch_size": batch_size, "progress": False, "log_every": max(1, steps // 10)},
        })
        train(cfg, overwrite=True)
        folder = Path(out_dir) / label / "final"
        models[label] = (mixer, load_causal_lm(folder).eval())
    return models


def save_recall_figures(points: list[RecallPoint], out_dir: str | Path, name: str = "recall") -> list[Path]:
    """<name>_vs_state.png (Zoology style: log state size, a line per mixer, a panel per (L, K);
    where no mixer has two state sizes, one panel with a point per mixer and (L, K) instead of a
    grid of single dots) and <name>_vs_pairs.png (a line per model)."""
    out_dir = Path(out_dir)
    settings = sorted({(p.seq_len, p.num_kv_pairs) for p in points})
    mixers = sorted({p.mixer for p in points})
    state, accuracy = "state size (floats per sequence)", "accuracy (fraction correct)"

    def curve(keep) -> tuple[list[float], list[float]]:
        pts = sorted((p.state_size, p.accuracy) for p in points if keep(p))
        return [float(s) for s, _ in pts], [a for _, a in pts]

    by_setting = {(L, K): {m: curve(lambda p: p.mixer == m and (p.seq_len, p.num_kv_pairs) == (L, K)) for m in mixers}
                  for L, K in settings}
    if any(len(xs) > 1 for series in by_setting.values() for xs, _ in series.values()):
        state_panels = [CurvePanel(f"MQAR L={L}, K={K}", state, accuracy, {m: c for m, c in series.items() if c[0]},
                                   ylim=ACCURACY_LIMITS) for (L, K), series in by_setting.items()]
    else:
        state_panels = [CurvePanel("MQAR accuracy vs state size", state, accuracy,
                                   {f"{m}, L={L}, K={K}": c for (L, K), series in by_setting.items()
                                    for m, c in series.items() if c[0]}, ylim=ACCURACY_LIMITS)]
    pair_series = {}
    for label in dict.fromkeys(p.label for p in points):
        pts = sorted((p.num_kv_pairs, p.accuracy) for p in points if p.label == label)
        pair_series[label] = ([float(k) for k, _ in pts], [a for _, a in pts])
    pair_panel = CurvePanel("MQAR accuracy vs key-value pairs", "key-value pairs K", accuracy, pair_series,
                            ylim=ACCURACY_LIMITS)
    return [save_curve_panels(out_dir / f"{name}_vs_state.png", state_panels),
            save_curve_panels(out_dir / f"{name}_vs_pairs.png", [pair_panel])]


def summarize(points: list[RecallPoint]) -> dict:
    """JSON-ready summary: every point plus mean accuracy per model."""
    labels = dict.fromkeys(p.label for p in points)
    return {"points": [p.to_json() for p in points],
            "mean_accuracy": {lab: float(np.mean([p.accuracy for p in points if p.label == lab])) for lab in labels}}
