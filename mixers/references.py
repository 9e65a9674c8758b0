"""The published online-learning rules of the scan class, keyed on the spec's axes.

A spec of the scan class (no exact parallel form) that is a published mixer is checked by
``verify`` against that mixer's hand-written recurrence (mixers/ops/online.py, each written
from the paper's equation). The exact classes' hand-written recurrences are rows of the class
table in lower.py; ``lower.hand_written(spec)`` asks here for the scan class.

    rule                    memory                     bias       retention          optimizer
    recurrent_ttt_linear    matrix(layernorm_residual) l2         none               gd
    recurrent_huber_delta   matrix                     huber      none | l2_decay    retain_then_gd (gd: none)
    recurrent_lp_delta      matrix                     lp         none | l2_decay    retain_then_gd (gd: none)
    recurrent_titans        matrix                     l2         none | l2_decay    momentum
    recurrent_l1            matrix                     l2 | dot   l1                 gd

(l2_decay with a scalar or fixed gate: the rules take one decay per head. Huber, ℓp and ℓ1 take
the optimizer's ``steps``; the others only one step. A per-key rate (gd rate='key') has no rule.)
"""
from __future__ import annotations

import functools
from typing import Callable

from assocmem.memories import (
    GD, L1, L2, DotProduct, Huber, L2Decay, Lp, Matrix, Momentum, NoRetention, RetainThenGD,
)

from .ops import online
from .spec import MixerSpec


def online_rule(spec: MixerSpec) -> tuple[str, Callable] | None:
    """(name, fn) of the published scan-class rule equal to ``spec`` (table above), or None."""
    m, b, r, o = spec.memory, spec.bias, spec.retention, spec.optimizer
    K = getattr(o, "steps", 1)
    if not isinstance(m, Matrix) or getattr(o, "rate", "scalar") == "key":
        return None
    if isinstance(r, L1) and m.norm == "none" and isinstance(b, (L2, DotProduct)):
        name = "recurrent_l1" if K == 1 else f"recurrent_l1(steps={K})"
        return name, functools.partial(online.recurrent_l1, lam=r.lam, bias=b.kind if isinstance(b, L2) else "dot",
                                       steps=K)
    if not isinstance(r, (NoRetention, L2Decay)):
        return None
    if isinstance(r, L2Decay) and r.gate == "key":
        return None
    if m.norm == "layernorm_residual":
        if isinstance(b, L2) and isinstance(r, NoRetention) and isinstance(o, GD) and K == 1:
            return "recurrent_ttt_linear", online.recurrent_ttt_linear
        return None
    retain_first = isinstance(o, RetainThenGD) or (isinstance(o, GD) and isinstance(r, NoRetention))
    suffix = "" if K == 1 else f"(steps={K})"
    if isinstance(b, Huber) and retain_first:
        return ("recurrent_huber_delta" + suffix,
                functools.partial(online.recurrent_huber_delta, delta=b.delta, steps=K))
    if isinstance(b, Lp) and retain_first:
        return ("recurrent_lp_delta" + suffix,
                functools.partial(online.recurrent_lp_delta, p=b.p, clip=b.clip, steps=K))
    if isinstance(b, L2) and isinstance(o, Momentum):
        return "recurrent_titans", functools.partial(online.recurrent_titans, momentum=o.eta)
    return None
