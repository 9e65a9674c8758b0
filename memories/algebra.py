"""Which combinations of the four axes are valid, and which algebraic class
each valid combination falls in. One place, used by MixerSpec validation,
``derive(...).describe()`` and the lowering rules in mixers/lower.py.

Classes (ARCHITECTURE.md, "lower"):

    hebbian        Matrix + DotProduct + (None | L2Decay) + GD
    delta          Matrix + L2 + (None | L2Decay) + RetainThenGD (per-key decay: KDA),
                   or + (None | L2Decay scalar/fixed) + Implicit, or + None + GD
    diag_rank1     Matrix + L2 + L2Decay + GD (the "joint" single step)
    spectral       Spectral + CharacteristicFunction + None + ClosedForm
    nonparametric  NonParametric + NadarayaWatson + (None | Window) + ClosedForm
    scan           everything else that is valid (Lp, Huber, MLP memory, Momentum, KL, ...)
"""
from __future__ import annotations

from typing import Protocol

from .bias import L2, CharacteristicFunction, DotProduct, NadarayaWatson
from .memory import Matrix, NonParametric, Spectral
from .optimizer import GD, ClosedForm, Implicit, RetainThenGD
from .retention import KL, L2Decay, NoRetention, Proximal, Window


class AxesLike(Protocol):
    memory: object
    bias: object
    retention: object
    optimizer: object


def check_axes(spec: AxesLike) -> None:
    """Raise ValueError naming the offending field when the axes do not compose."""
    m, b, r, o = spec.memory, spec.bias, spec.retention, spec.optimizer
    read_time = isinstance(b, (NadarayaWatson, CharacteristicFunction))
    if isinstance(m, NonParametric) != isinstance(b, NadarayaWatson):
        raise ValueError(
            f"bias: {b.kind!r} with memory {m.kind!r} — a nonparametric memory (KV cache) pairs with "
            "the nadaraya_watson bias and nadaraya_watson needs a nonparametric memory"
        )
    if isinstance(m, Spectral) != isinstance(b, CharacteristicFunction):
        raise ValueError(
            f"bias: {b.kind!r} with memory {m.kind!r} — a spectral memory pairs with the "
            "characteristic_function bias and vice versa"
        )
    if isinstance(o, ClosedForm) != read_time:
        raise ValueError(
            f"optimizer: {o.kind!r} with bias {b.kind!r} — closed_form is the optimizer for the "
            "nadaraya_watson and characteristic_function biases, and only for them; parametric "
            "memories use gd, retain_then_gd, implicit or momentum"
        )
    if isinstance(r, Window) and not isinstance(m, NonParametric):
        raise ValueError(
            f"retention: window(size={r.size}) on a {m.kind!r} memory — a window can only evict "
            "entries of a nonparametric memory (KV cache); for a parametric memory use l2_decay"
        )
    if isinstance(m, NonParametric) and isinstance(r, Window) and m.window not in (None, r.size):
        raise ValueError(
            f"retention.size={r.size} disagrees with memory.window={m.window}; set one of them"
        )
    if read_time and not isinstance(r, (NoRetention, Window)):
        raise ValueError(f"retention: {r.kind!r} is not defined for the {m.kind!r} memory; use none")
    if isinstance(r, Proximal) and not isinstance(o, Implicit):
        raise ValueError(
            f"retention: 'proximal' with optimizer {o.kind!r} — the proximal term has zero gradient at "
            "M_{t-1}, so it only acts through the 'implicit' optimizer"
        )
    if isinstance(r, KL) and not (isinstance(m, Matrix) and isinstance(o, GD)):
        raise ValueError("retention: 'kl' needs a matrix memory and the gd optimizer (mirror descent)")
    if isinstance(r, L2Decay) and r.gate == "key" and not isinstance(m, Matrix) and m.kind != "diagonal":
        raise ValueError(f"retention.gate='key' needs a matrix or diagonal memory, got {m.kind!r}")


def window_of(spec: AxesLike) -> int | None:
    """Effective window of a nonparametric memory (None = unbounded)."""
    if isinstance(spec.retention, Window):
        return spec.retention.size
    return getattr(spec.memory, "window", None)


def algebra_class(spec: AxesLike) -> str:
    """The lowering class of a valid spec (see module docstring)."""
    m, b, r, o = spec.memory, spec.bias, spec.retention, spec.optimizer
    if isinstance(m, Spectral):
        return "spectral"
    if isinstance(m, NonParametric):
        return "nonparametric"
    plain = isinstance(m, Matrix) and m.norm == "none"
    decay = isinstance(r, (NoRetention, L2Decay))
    if plain and decay and isinstance(b, DotProduct) and isinstance(o, GD):
        return "hebbian"
    if plain and isinstance(b, L2):
        scalar_decay = isinstance(r, NoRetention) or (isinstance(r, L2Decay) and r.gate != "key")
        if decay and isinstance(o, RetainThenGD):  # per-key decay too: Kimi Delta Attention
            return "delta"
        if scalar_decay and isinstance(o, Implicit):
            return "delta"
        if isinstance(r, NoRetention) and isinstance(o, GD):
            return "delta"
        if isinstance(r, L2Decay) and isinstance(o, GD):
            return "diag_rank1"
    return "scan"
