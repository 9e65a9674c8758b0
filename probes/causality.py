"""Perturb-the-future causality check for ops, mixers and language models.

A sequence map y = f(x) is causal when y_p depends only on x_0..x_p. For every cut
t ∈ cuts (default 0..T−2) we replace the future x[:, t+1:] by different values,
rerun f, and record at each position p ≤ t the change |y'_p − y_p| (max over batch
and features). The report gives

    leak[p]     = max over cuts t ≥ p of |Δy_p|     (should be 0)
    first_leak  = the smallest p with leak[p] > atol (None when causal)
    max_leak    = max_p leak[p]

By default causality must hold bit for bit (atol = 0): masked future terms are exact
zeros in every correct implementation. ``atol`` relaxes it for implementations that
legitimately reorder sums.

Three targets, one core:
  (a) a functional op   o, S = op(q, k, v, *, log_alpha, beta, ...)   -> ``op_causality``
  (b) a Mixer module    y, state = mixer(x)                           -> ``mixer_causality``
  (c) an HF causal LM   logits = model(input_ids).logits              -> ``model_causality``
``spec_causality`` runs (a) on random inputs consistent with a MixerSpec.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import torch

TIME_INDEXED_OP_INPUTS = ("q", "k", "v", "log_alpha", "beta", "eta")


@dataclass
class CausalityReport:
    """Result of one causality check (see the module docstring)."""

    target: str
    causal: bool
    first_leak: int | None
    max_leak: float
    leak: list[float]  # [T] per output position
    atol: float
    seq_len: int

    def to_json(self) -> dict:
        return asdict(self)


def _perturb_float(x: torch.Tensor, cut: int, gen: torch.Generator) -> torch.Tensor:
    """New values at positions > cut (time axis 1). One-signed tensors (gates: log α < 0,
    β > 0) are scaled by exp(N(0, ½²)) so they keep their sign; others get N(0, std²) added."""
    noise = torch.randn(x[:, cut + 1:].shape, generator=gen, dtype=torch.float64).to(x.dtype)
    out = x.detach().clone()
    if bool((x > 0).all()) or bool((x < 0).all()):
        out[:, cut + 1:] = x[:, cut + 1:] * torch.exp(0.5 * noise)
    else:
        std = float(x.detach().double().std()) if x.numel() > 1 else 1.0
        out[:, cut + 1:] = x[:, cut + 1:] + noise * (std if std > 0 else 1.0)
    return out


def _perturb_ids(vocab_size: int) -> Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]:
    def perturb(ids: torch.Tensor, cut: int, gen: torch.Generator) -> torch.Tensor:
        shift = torch.randint(1, vocab_size, ids[:, cut + 1:].shape, generator=gen)  # never 0: every id changes
        out = ids.clone()
        out[:, cut + 1:] = (ids[:, cut + 1:] + shift) % vocab_size
        return out
    return perturb


@torch.no_grad()
def check_causality(
    run: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    inputs: Mapping[str, torch.Tensor],
    *,
    perturb: Callable[[torch.Tensor, int, torch.Generator], torch.Tensor] = _perturb_float,
    target: str = "function",
    atol: float = 0.0,
    cuts: list[int] | None = None,
    seed: int = 0,
) -> CausalityReport:
    """The core check: ``run(inputs) -> y [B, T, ...]``; every tensor of ``inputs`` has time on axis 1."""
    if atol < 0:
        raise ValueError(f"atol: must be >= 0, got {atol}")
    lengths = {name: x.shape[1] for name, x in inputs.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"inputs: all time-indexed tensors need the same length on axis 1, got {lengths}")
    T = next(iter(lengths.values()))
    cuts = list(range(T - 1)) if cuts is None else sorted(cuts)
    if cuts and not (0 <= cuts[0] and cuts[-1] < T - 1):
        raise ValueError(f"cuts: values must lie in [0, {T - 2}], got {cuts}")
    base = run(dict(inputs))
    if base.shape[1] != T:
        raise ValueError(f"run: output must have the time axis 1 of length {T}, got shape {tuple(base.shape)}")
    if not torch.isfinite(base).all():
        raise ValueError(f"{target}: output is not finite on the unperturbed inputs")
    gen = torch.Generator().manual_seed(seed)
    leak = torch.zeros(T, dtype=torch.float64)
    for t in cuts:
        out = run({name: perturb(x, t, gen) for name, x in inputs.items()})
        diff = (out[:, :t + 1] - base[:, :t + 1]).double().abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))  # a NaN that was not there is a leak
        leak[:t + 1] = torch.maximum(leak[:t + 1], diff.transpose(0, 1).reshape(t + 1, -1).amax(1))
    over = torch.nonzero(leak > atol).flatten()
    first = int(over[0]) if len(over) else None
    return CausalityReport(target, first is None, first, float(leak.max()), leak.tolist(), atol, T)


def _first_output(out) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


def op_causality(
    op: Callable,
    inputs: Mapping[str, torch.Tensor],
    *,
    constants: Mapping[str, object] | None = None,
    target: str = "op",
    atol: float = 0.0,
    cuts: list[int] | None = None,
    seed: int = 0,
) -> CausalityReport:
    """(a) A functional op called as ``op(**inputs, **constants)`` returning o or (o, S).

    inputs: time-indexed keyword tensors (q, k, v, gates), time on axis 1;
    constants: keywords passed unchanged (theta, weights, scale, chunk_size, ...).
    """
    constants = dict(constants or {})
    clash = set(inputs) & set(constants)
    if clash:
        raise ValueError(f"constants: names {sorted(clash)} are also in inputs")
    return check_causality(lambda kw: _first_output(op(**kw, **constants)), inputs, target=target,
                           atol=atol, cuts=cuts, seed=seed)


def mixer_causality(mixer: torch.nn.Module, x: torch.Tensor, *, target: str = "mixer", atol: float = 0.0,
                    cuts: list[int] | None = None, seed: int = 0) -> CausalityReport:
    """(b) A Mixer module ``mixer(x) -> y or (y, state)`` on x [B, T, d_model]."""
    return check_causality(lambda kw: _first_output(mixer(kw["x"])), {"x": x}, target=target, atol=atol,
                           cuts=cuts, seed=seed)


def model_causality(model: torch.nn.Module, input_ids: torch.Tensor, *, target: str = "model",
                    atol: float = 0.0, cuts: list[int] | None = None, seed: int = 0) -> CausalityReport:
    """(c) An HF causal LM ``model(input_ids=...).logits`` on input_ids [B, T]; future ids
    are replaced by other ids (every perturbed id differs from the original)."""
    vocab = int(model.config.vocab_size)
    return check_causality(lambda kw: model(input_ids=kw["input_ids"]).logits, {"input_ids": input_ids},
                           perturb=_perturb_ids(vocab), target=target, atol=atol, cuts=cuts, seed=seed)


def probe_ids(vocab_size: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """The input ids of the model check [2, seq_len]: row 0 uniform random ids; row 1 random ids each
    written twice (a a b b ...), adjacent duplicates where a token-merging layer (Wiola's ATM) merges."""
    gen = torch.Generator().manual_seed(seed)
    uniform = torch.randint(0, vocab_size, (1, seq_len), generator=gen)
    pairs = torch.randint(0, vocab_size, (1, (seq_len + 1) // 2), generator=gen).repeat_interleave(2, dim=1)
    return torch.cat([uniform, pairs[:, :seq_len]])


def model_causality_in_modes(model: torch.nn.Module, input_ids: torch.Tensor, modes: list[str], *,
                             target: str = "model", atol: float = 0.0, seed: int = 0) -> list[CausalityReport]:
    """``model_causality`` with the model in each of ``modes`` ('eval', 'train'); targets get the mode
    as a suffix. Training mode matters for layers that run in training only (Wiola's token merging);
    a model with dropout is not deterministic in training mode and would show noise as leaks."""
    bad = sorted(set(modes) - {"eval", "train"})
    if bad or not modes:
        raise ValueError(f"modes: choose from 'eval' and 'train', got {modes}")
    was_training, reports = model.training, []
    try:
        for mode in modes:
            model.train(mode == "train")
            reports.append(model_causality(model, input_ids, target=f"{target} ({mode})", atol=atol, seed=seed))
    finally:
        model.train(was_training)
    return reports


def spec_causality(spec, *, form: str = "auto", seq_len: int = 19, atol: float = 0.0, seed: int = 0,
                   chunk_size: int | None = 8) -> CausalityReport:
    """(a) on the lowered op of a MixerSpec (or preset name), random float64 inputs consistent
    with the spec (``mixers.verify.make_case``), nonzero initial state; form "derived" checks
    ``derive(spec)`` itself (with the layer's read-out, ``mixers.lower.derived``). chunk_size is passed
    to chunk forms (small, so T spans chunks)."""
    from assocmem.mixers import get_preset
    from assocmem.mixers.lower import derived, lower
    from assocmem.mixers.verify import make_case

    spec = get_preset(spec) if isinstance(spec, str) else spec
    case = make_case(spec, B=2, T=seq_len, seed=seed, with_state=True)
    inputs = {n: t.detach() for n, t in case.tensors.items() if n in TIME_INDEXED_OP_INPUTS}
    constants = {n: t.detach() for n, t in case.tensors.items() if n not in TIME_INDEXED_OP_INPUTS}
    constants.update(scale=case.scale, initial_state=case.initial_state)
    if form == "derived":
        fn, name = derived(spec), "derived"
    else:
        lowered = lower(spec, form)
        fn, name = lowered.fn, lowered.name
        if name == "chunk" and chunk_size is not None:
            constants["chunk_size"] = chunk_size
    return op_causality(fn, inputs, constants=constants, target=f"{spec.name or 'spec'}:{name}", atol=atol,
                        seed=seed)


def tiny_spec(spec, *, num_heads: int = 2, head_dim: int = 8):
    """A MixerSpec (or preset name) at test size: ``num_heads`` heads of ``head_dim``
    (attention GQA → 1 KV head; SCA query heads → all heads)."""
    from assocmem.mixers import LayerOptions, get_preset

    spec = get_preset(spec) if isinstance(spec, str) else spec
    layer = spec.layer.model_dump()
    layer.update(num_heads=num_heads, head_dim=head_dim)
    if layer["attention"]["num_kv_heads"] is not None:
        layer["attention"]["num_kv_heads"] = 1
    layer["sca"]["query_heads"] = None
    return spec.model_copy(update={"layer": LayerOptions.model_validate(layer)})


def preset_mixer_causality(spec, *, form: str = "auto", d_model: int = 16, seq_len: int = 19,
                           atol: float = 0.0, cuts: list[int] | None = None, seed: int = 0) -> CausalityReport:
    """(b) on ``build_mixer(tiny_spec(spec), d_model, form=form)`` in float64, random x [2, T, d_model]."""
    from assocmem.mixers.layer import build_mixer

    spec = tiny_spec(spec)
    torch.manual_seed(seed)
    mixer = build_mixer(spec, d_model, form=form).double().eval()
    x = torch.randn(2, seq_len, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return mixer_causality(mixer, x, target=f"mixer:{spec.name or 'spec'}:{form}", atol=atol, cuts=cuts, seed=seed)
