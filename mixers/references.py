"""hand_written(spec): the published update rule that a spec should reproduce.

Keyed on the spec's axes (not its name), so a user's spec that happens to be a
published mixer is checked against that mixer's hand-written recurrence. Each
entry is written from the paper's equation in mixers/ops/<family>.py.
"""
from __future__ import annotations

import functools
from typing import Callable

from assocmem.memories import (
    L2, GD, Huber, Implicit, L2Decay, Lp, Matrix, Momentum, NoRetention, RetainThenGD, window_of,
)

from .spec import MixerSpec


def hand_written(spec: MixerSpec) -> tuple[str, Callable] | None:
    """(name, fn) of the published recurrence equal to ``spec``, or None."""
    found = _lookup(spec)
    if found is None:
        return None
    return found[0], with_lr(found[1], getattr(spec.optimizer, "lr", 1.0))


def _lookup(spec: MixerSpec) -> tuple[str, Callable] | None:
    cls = spec.algebra
    if cls == "hebbian":
        from .ops.hebbian import recurrent_hebbian

        return "recurrent_hebbian", recurrent_hebbian
    if cls in ("delta", "diag_rank1"):
        from .ops import delta

        if cls == "diag_rank1":
            return "recurrent_delta_rule_joint", delta.recurrent_delta_rule_joint
        if isinstance(spec.optimizer, Implicit):
            return "recurrent_longhorn", delta.recurrent_longhorn
        return "recurrent_delta_rule", delta.recurrent_delta_rule
    if cls == "spectral":
        from .ops.spectral import recurrent_spectral

        return "recurrent_spectral", functools.partial(recurrent_spectral, den_floor=spec.memory.den_floor)
    if cls == "nonparametric":
        from .ops.attention import recurrent_softmax_attention

        return "recurrent_softmax_attention", functools.partial(recurrent_softmax_attention, window=window_of(spec))
    return _online(spec)


def _online(spec: MixerSpec) -> tuple[str, Callable] | None:
    from .ops import online

    m, b, r, o = spec.memory, spec.bias, spec.retention, spec.optimizer
    if not isinstance(m, Matrix) or not isinstance(r, (NoRetention, L2Decay)):
        return None
    if isinstance(r, L2Decay) and r.gate == "key":
        return None
    if m.norm == "layernorm_residual":
        if isinstance(b, L2) and isinstance(r, NoRetention) and isinstance(o, GD):
            return "recurrent_ttt_linear", online.recurrent_ttt_linear
        return None
    retain_first = isinstance(o, RetainThenGD) or (isinstance(o, GD) and isinstance(r, NoRetention))
    if isinstance(b, Huber) and retain_first:
        return "recurrent_huber_delta", functools.partial(online.recurrent_huber_delta, delta=b.delta)
    if isinstance(b, Lp) and retain_first:
        return "recurrent_lp_delta", functools.partial(online.recurrent_lp_delta, p=b.p)
    if isinstance(b, L2) and isinstance(o, Momentum):
        return "recurrent_titans", functools.partial(online.recurrent_titans, momentum=o.eta)
    return None


def with_lr(fn: Callable, lr: float) -> Callable:
    """Hand-written forms take η_t = β_t; an optimizer's base lr makes η_t = lr·β_t."""
    if lr == 1.0:
        return fn

    @functools.wraps(fn)
    def scaled(q, k, v, *, beta=None, **kw):
        beta = q.new_full(q.shape[:3], lr) if beta is None else lr * beta
        return fn(q, k, v, beta=beta, **kw)

    return scaled
