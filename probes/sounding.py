"""The sounding hammer (seed 003 §4.4): how concentrated a parameter's mean gradient is in Fourier modes.

For a parameter W and an axis d of length n (or its first n indices),

    Ḡ      = E_x[∇_W L]                         the gradient of the mean loss over the data
    P(k)   = |rfft(Ḡ, dim=d)[k]|²               k = 0 … ⌊n/2⌋                          (eq. 5)
    ρ      = Σ_{k ∈ top-K} P(k) / Σ_k P(k)                                            (eq. 5)

Eq. 5 does not say how the other axes of Ḡ enter P(k); ``fourier_power`` picks the reading
(training/fourier.py): power_of_sum (default) sums Ḡ over them first, as seed 003 §4.1 says "G is
summed over the embedding dimension"; sum_of_powers adds each column's power.

ρ = 1 when Ḡ is one cosine along the axis. For a flat (white-noise) spectrum the K largest of
N = ⌊n/2⌋ + 1 bins hold Σ_{i≤K} (H_N − H_{i−1}) / N of the power on average (``rho_flat``,
order statistics of exponentials): 0.23 for K = 16 of 257 bins, the paper's setting for GPT-2,
not K/N = 0.06. That is the flat ρ of one signal (power_of_sum); under sum_of_powers a flat
gradient over many columns scores less, toward K/N. The report gives ρ and rho_flat, so a ρ can
be read against what a structureless gradient scores. The paper's prescription: apply FGP only
where ρ > 0.6.

Works on any HF causal LM (assocmem's or a transformers model): the loss is the next-token
cross-entropy on supervised positions, in eval mode (no dropout).
"""
from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass
from typing import Callable

import datasets
import torch
from torch import nn

from assocmem.training.config_files import read_yaml
from assocmem.training.fourier import (FourierPower, flat_spectrum_regularity, mode_power, num_bins, regularity,
                                      top_modes)
from assocmem.training.metrics import batch_tensors
from assocmem.training.objective import CausalLMObjective


@dataclass
class Sounding:
    """The sounding of one parameter along one axis."""

    param: str
    shape: list[int]
    axis: int
    length: int
    top_k: int
    fourier_power: str     # how P(k) reads eq. 5 (training/fourier.py FOURIER_POWERS)
    rho: float             # eq. 5
    rho_flat: float        # the expected ρ of a white-noise gradient with as many bins
    top_modes: list[int]   # the K strongest bins (0 = the mean over the axis)
    dominant_mode: int     # the strongest bin k ≥ 1
    power: list[float]     # P(k), k = 0 … ⌊n/2⌋

    def to_json(self) -> dict:
        return asdict(self)


def select_parameters(model: nn.Module, patterns: list[str]) -> dict[str, nn.Parameter]:
    """The trainable parameters whose names match any glob in ``patterns`` (each must match one)."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    unmatched = [g for g in patterns if not any(fnmatch.fnmatchcase(n, g) for n in params)]
    if unmatched:
        raise ValueError(f"--params {unmatched} match no trainable parameter; parameters: {list(params)}")
    return {n: p for n, p in params.items() if any(fnmatch.fnmatchcase(n, g) for g in patterns)}


def mean_gradient(model: nn.Module, data: datasets.Dataset, *, batch_size: int,
                  params: dict[str, nn.Parameter], report: Callable[[str], None] | None = None
                  ) -> dict[str, torch.Tensor]:
    """Ḡ = ∇ of the mean next-token loss over every supervised position of ``data``, per parameter.

    Each batch adds (Σ token losses) / N_total to the backward pass, so the sum over batches is the
    gradient of the mean over all N_total supervised positions (what full-batch training sees).
    ``report`` (e.g. training/progress.progress_line) hears "gradient batch b/B ..." before each batch.
    """
    device = next(model.parameters()).device
    objective = CausalLMObjective(model, "all")
    starts = range(0, len(data), batch_size)
    total = 0
    for s in starts:
        _, labels = batch_tensors(data, list(range(s, min(s + batch_size, len(data)))), device)
        total += int((labels[:, 1:] != -100).sum())
    if total == 0:
        raise ValueError("the data has no supervised position (every label is -100): no gradient to sound")
    was_training = model.training
    model.eval()
    model.zero_grad(set_to_none=True)
    try:
        for b, s in enumerate(starts, start=1):
            if report is not None:
                report(f"gradient batch {b}/{len(starts)} ...")
            ids, labels = batch_tensors(data, list(range(s, min(s + batch_size, len(data)))), device)
            loss_sum, _, _ = objective(ids, labels)
            (loss_sum / total).backward()
        grads = {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
                 for n, p in params.items()}
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return grads


def sound(name: str, grad: torch.Tensor, *, axis: int, length: int | None, top_k: int,
          fourier_power: FourierPower = "power_of_sum") -> Sounding:
    """ρ, the top modes and the spectrum of one mean gradient along ``axis`` (first ``length`` indices)."""
    size = grad.shape[axis]
    n = size if length is None else length
    if not 2 <= n <= size:
        raise ValueError(f"{name}: --length {n} must lie in [2, {size}] (axis {axis} of shape {tuple(grad.shape)})")
    if not 1 <= top_k <= num_bins(n):
        raise ValueError(f"{name}: --top-k {top_k} must lie in [1, {num_bins(n)}] (the rfft bins of length {n})")
    power = mode_power(grad, axis=axis, n=n, power=fourier_power)
    return Sounding(param=name, shape=list(grad.shape), axis=axis % grad.dim(), length=n, top_k=top_k,
                    fourier_power=fourier_power,
                    rho=regularity(power, top_k), rho_flat=flat_spectrum_regularity(num_bins(n), top_k),
                    top_modes=top_modes(power, top_k, skip_dc=False), dominant_mode=top_modes(power, 1, skip_dc=True)[0],
                    power=[float(v) for v in power])


def sounding_hammer(model: nn.Module, data: datasets.Dataset, *, params: list[str], axis: int = 0,
                    length: int | None = None, top_k: int = 16, batch_size: int = 16,
                    fourier_power: FourierPower = "power_of_sum",
                    report: Callable[[str], None] | None = None) -> list[Sounding]:
    """Sound every selected parameter (globs) of ``model`` on ``data`` (see the module docstring).

    Parameters whose ``axis`` does not exist or is shorter than 2 (biases, gains along axis 1) are
    skipped only when a glob selected them among others; a parameter named exactly must fit.
    """
    chosen = select_parameters(model, params)
    fits = {n: p for n, p in chosen.items() if -p.dim() <= axis < p.dim() and p.shape[axis] >= max(2, length or 2)}
    exact = [g for g in params if g in chosen and g not in fits]
    if exact:
        raise ValueError(f"{exact}: axis {axis}{f' with --length {length}' if length else ''} does not fit the "
                         f"shape {[tuple(chosen[g].shape) for g in exact]}")
    if not fits:
        raise ValueError(f"no selected parameter has an axis {axis} of length >= {max(2, length or 2)}")
    grads = mean_gradient(model, data, batch_size=batch_size, params=fits, report=report)
    return [sound(n, g, axis=axis, length=length, top_k=top_k, fourier_power=fourier_power) for n, g in grads.items()]


# ---------------------------------------------------------------- command line (cli/probe.py)
def _model_and_data(args):
    """(model, data section dict, provenance) for the MODEL argument (``assocmem probe sounding``)."""
    from pathlib import Path

    from assocmem.training.config import load_config
    from assocmem.training.data import data_vocab_size
    from assocmem.training.loop import seed_everything
    from assocmem.training.model_factory import build_from_config

    from .io import load_model

    ref = Path(args.model)
    if ref.is_file() and ref.suffix in (".yaml", ".yml"):
        cfg = load_config(ref, args.overrides)
        seed_everything(cfg.seed)
        model = build_from_config(cfg.model, vocab_size=data_vocab_size(cfg.data)).eval()
        return model, cfg.data.model_dump(mode="json"), {"model": str(ref), "trained": False, "seed": cfg.seed}
    others = [o for o in args.overrides if not o.strip().startswith("data.")]
    if others:
        raise ValueError(f"--set {others[0]}: for a saved model only its data can be set (--set data.KEY=VALUE); "
                         f"the other fields are set in a TrainConfig YAML given as MODEL")
    model, info = load_model(args.model)
    data = None
    if (ref / "config.yaml").is_file():
        data = read_yaml(ref / "config.yaml")["data"]
    return model, data, info


def _data(section: dict | None, args):
    from pydantic import TypeAdapter, ValidationError

    from assocmem.training.config import ConfigError, DataConfig, apply_overrides
    from assocmem.training.data import build_datasets
    from assocmem.training.evaluate import data_section
    from assocmem.training.mixture import Mixture

    if args.data:
        section = data_section(args.data)
    if section is None:
        raise ValueError("this model has no data of its own: pass --data FILE.yaml (a `data:` section)")
    section = apply_overrides({"data": section}, [o for o in args.overrides if o.startswith("data.")])["data"]
    try:
        data_cfg = TypeAdapter(DataConfig).validate_python(section)
    except ValidationError as err:  # the location starts with the data kind (the union's tag): data.<field>
        first = err.errors()[0]
        where = ".".join(["data", *map(str, first["loc"][1:] or first["loc"])])
        raise ConfigError(f"invalid data section: {where}: {first['msg']}") from None
    train, held_out, vocab = build_datasets(data_cfg)
    if isinstance(train, Mixture):  # the first stage's blocks, every source
        train = train.stage_dataset(0)
    data = train if args.split == "train" else held_out
    if data is None:
        raise ValueError("the data has no eval split; use --split train")
    if args.sequences is not None:
        data = data.select(range(min(args.sequences, len(data))))
    return data, data_cfg, vocab


def run_sounding(args):
    """Sound the model's parameters and write sounding.json and sounding.png into --out."""
    import json

    import torch

    from assocmem.training.progress import progress_line

    from .io import prepare_out, write_json

    model, section, info = _model_and_data(args)
    data, data_cfg, vocab = _data(section, args)
    if vocab > model.config.vocab_size:
        raise ValueError(f"the data uses {vocab} token ids but the model's vocabulary is {model.config.vocab_size}")
    out = prepare_out(args.out, args.overwrite)
    torch.manual_seed(args.seed)
    results = sounding_hammer(model, data, params=args.params, axis=args.axis, length=args.length,
                              top_k=args.top_k, batch_size=args.batch_size, fourier_power=args.fourier_power,
                              report=progress_line("sounding"))
    report = {**info, "data": data_cfg.model_dump(mode="json"), "split": args.split, "sequences": len(data),
              "axis": args.axis, "top_k": args.top_k, "fourier_power": args.fourier_power, "threshold": args.threshold,
              "steer": [r.param for r in results if r.rho > args.threshold],
              "soundings": [r.to_json() for r in results]}
    write_json(out, "sounding", report)
    save_sounding_figure(results, out / "sounding.png", threshold=args.threshold)
    for r in sorted(results, key=lambda r: -r.rho)[:20]:
        print(f"{r.param:50s} ρ={r.rho:.3f} (flat {r.rho_flat:.3f})  top modes {r.top_modes[:8]}")
    print(json.dumps({"steer": report["steer"]}))
    return out


def save_sounding_figure(results: list[Sounding], path, *, threshold: float, max_spectra: int = 6):
    """ρ per parameter (with the white-noise ρ and the threshold), and the strongest spectra."""
    from .plotting import finish, log_axis, plt, save_figure

    ordered = sorted(results, key=lambda r: -r.rho)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, max(3.0, 0.25 * len(results) + 1)))
    names = [r.param for r in ordered][::-1]
    left.barh(names, [r.rho for r in ordered][::-1], color="tab:blue", label="ρ")
    left.scatter([r.rho_flat for r in ordered][::-1], names, color="k", marker="|", s=80, label="white noise")
    left.axvline(threshold, color="tab:red", ls="--", label=f"threshold {threshold}")
    left.set_xlim(0, 1)
    left.set_xlabel("ρ (top-K power / total)")
    left.set_ylabel("parameter")
    left.tick_params(axis="y", labelsize=6)
    for r in ordered[:max_spectra]:
        total = sum(r.power)
        right.plot(range(len(r.power)), [p / total + 1e-12 for p in r.power], label=f"{r.param} (ρ={r.rho:.2f})")
    log_axis(right.yaxis)
    right.set_xlabel("mode k (Fourier index along the axis)")
    right.set_ylabel("P(k) / Σ P (share of power)")
    finish(fig)
    return save_figure(fig, path, dpi=120)
