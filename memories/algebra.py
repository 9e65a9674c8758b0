"""Which combinations of the four axes are valid, and which algebraic class
each valid combination falls in. One place, used by MixerSpec validation,
``derive(...).describe()`` and the lowering rules in mixers/lower.py.

Classes (their forms: the class table in mixers/lower.py):

    hebbian        Matrix + DotProduct + (None | L2Decay) + RetainThenGD (K steps: one with K·β),
                   or + GD with one step (K steps: only without retention)
    delta          Matrix + L2 + (None | L2Decay) + RetainThenGD (per-key decay: KDA),
                   or + (None | L2Decay scalar/fixed) + Implicit, or + None + GD
                   (K steps of any of them: one delta step with an effective β, mixers/ops/depth.py)
    diag_rank1     Matrix + L2 + L2Decay + GD (the "joint" single step)
    dplr           Matrix + (L2 with GD(rate="key") | RemoveReplace) + (None | L2Decay) + GD, one step:
                   diagonal plus low rank with a per-key rate or a separate removal key (RWKV-7)
    selective      Matrix + DotProduct + L2Decay(gate="entry") + (GD | RetainThenGD), one step: a decay
                   per entry of S (Mamba's selective SSM, Gu & Dao 2023); it does not factor into a
                   per-head or per-key decay, so it has no chunkwise matmul form (mixers/lower.py)
    spectral       Spectral + CharacteristicFunction + None + ClosedForm
    nonparametric  NonParametric + NadarayaWatson + (None | Window) + ClosedForm
    scan           everything else that is valid (Lp, Huber, MLP memory, Momentum, Newton, KL, ℓ1, the
                   joint step repeated K times, ...); Newton on ℓ2 equals a delta-class preset with another
                   β (memories/optimizer.py Newton) but runs the derived step

``GD(rate="key")`` (one step size per key row) is scalar-rate algebra only in the dplr class; with
any other bias or optimizer it is class scan.
"""
from __future__ import annotations

from typing import Protocol

from .bias import L2, CharacteristicFunction, DotProduct, NadarayaWatson, RemoveReplace
from .memory import Matrix, NonParametric, Spectral
from .optimizer import GD, ClosedForm, Implicit, Newton, RetainThenGD
from .retention import KL, L1, L2Decay, NoRetention, Proximal, Window


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
            "memories use gd, retain_then_gd, implicit, newton or momentum"
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
    if isinstance(r, Proximal) and not isinstance(o, (Implicit, Newton)):
        raise ValueError(
            f"retention: 'proximal' with optimizer {o.kind!r} — the proximal term has zero gradient at "
            "M_{t-1}, so it only acts through the 'implicit' optimizer or through the curvature of 'newton'"
        )
    if isinstance(r, KL) and not (isinstance(m, Matrix) and isinstance(o, GD)):
        raise ValueError("retention: 'kl' needs a matrix memory and the gd optimizer (mirror descent)")
    if isinstance(r, L2Decay) and r.gate == "key" and not isinstance(m, Matrix) and m.kind != "diagonal":
        raise ValueError(f"retention.gate='key' needs a matrix or diagonal memory, got {m.kind!r}")
    if isinstance(r, L2Decay) and r.gate == "entry" and not (isinstance(m, Matrix) and isinstance(o, (GD, RetainThenGD))):
        raise ValueError(f"retention.gate='entry' (one decay per entry of S ∈ R^{{K×V}}, Mamba) needs a matrix "
                         f"memory and the gd or retain_then_gd optimizer; got memory {m.kind!r}, optimizer {o.kind!r}")
    if isinstance(r, L1) and not isinstance(o, GD):
        raise ValueError(
            f"retention: 'l1' with optimizer {o.kind!r} — the ℓ1 retention is taken by one proximal-gradient "
            "step (soft-thresholding of the update), which only the 'gd' optimizer takes; use optimizer gd")
    if isinstance(o, GD) and o.rate == "key" and (not isinstance(m, Matrix) or isinstance(r, KL)):
        raise ValueError(
            f"optimizer.rate='key' (one step size per key row of S) needs a matrix memory without the kl "
            f"retention; got memory {m.kind!r}, retention {r.kind!r}; use rate='scalar'")


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
    gd = isinstance(o, GD) and o.rate == "scalar"
    one_step = getattr(o, "steps", 1) == 1
    if isinstance(r, L2Decay) and r.gate == "entry":
        selective = plain and isinstance(b, DotProduct) and one_step and (isinstance(o, RetainThenGD) or gd)
        return "selective" if selective else "scan"
    if plain and decay and isinstance(b, DotProduct):
        if isinstance(o, RetainThenGD) or (gd and (one_step or isinstance(r, NoRetention))):
            return "hebbian"
    if plain and isinstance(b, L2):
        scalar_decay = isinstance(r, NoRetention) or (isinstance(r, L2Decay) and r.gate != "key")
        if decay and isinstance(o, RetainThenGD):  # per-key decay too: Kimi Delta Attention
            return "delta"
        if scalar_decay and isinstance(o, Implicit):
            return "delta"
        if isinstance(r, NoRetention) and gd:
            return "delta"
        if isinstance(r, L2Decay) and gd and one_step:
            return "diag_rank1"
    if plain and decay and isinstance(o, GD) and one_step and (
            isinstance(b, RemoveReplace) or (isinstance(b, L2) and o.rate == "key")):
        return "dplr"
    return "scan"


def sums_keys(spec: AxesLike) -> bool:
    """Whether the write is a (decayed, weighted) sum of outer products v kᵀ, so that the same write of
    the value 1 is the normaliser Z_t of normalised linear attention (thesis eqs. 2.35–2.36): the
    hebbian class."""
    return algebra_class(spec) == "hebbian"
