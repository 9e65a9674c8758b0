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

Your own rules: a hand-written update of any spec, a function with the op contract of the derived
step (memories/derive.py: ``fn(q, k, v, *, log_alpha, beta, eta, ..., scale, initial_state,
output_final_state) -> (o, state)``), is registered in Python (``register_reference``) or named in
the spec itself (``reference: package.module:function``); ``verify`` holds it to the derivation and
every lowered form (``user_references``).
"""
from __future__ import annotations

import functools
import importlib
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
                functools.partial(online.recurrent_lp_delta, p=b.p, clip=b.clip, eps=b.eps, steps=K))
    if isinstance(b, L2) and isinstance(o, Momentum):
        return "recurrent_titans", functools.partial(online.recurrent_titans, momentum=o.eta)
    return None


# ----------------------------------------------------------------- your own rules

_REGISTERED: list[tuple[MixerSpec | str, str, Callable]] = []  # (spec or spec name, label, fn)


def register_reference(spec: MixerSpec | str, fn: Callable | None = None, *, name: str | None = None):
    """Register ``fn`` as a hand-written update of ``spec`` (a MixerSpec, or a spec name: every spec of
    that ``name``), for ``verify``. ``fn`` has the derived step's op contract (memories/derive.py): the
    same inputs (q, k, v and the gates the spec needs, ``scale``, ``initial_state``,
    ``output_final_state``) and the same (o, final state) out. ``name``: its label in verify's table
    (default: the function's name). A decorator without ``fn``::

        @register_reference(spec)
        def my_rule(q, k, v, *, beta=None, log_alpha=None, scale=None, initial_state=None,
                    output_final_state=False): ...
    """
    if not isinstance(spec, (MixerSpec, str)):
        raise TypeError(f"register_reference: spec must be a MixerSpec or a spec name, got {type(spec).__name__}")

    def add(f: Callable) -> Callable:
        if not callable(f):
            raise TypeError(f"register_reference: the reference of {spec if isinstance(spec, str) else spec.name!r} "
                            f"must be a function with the op contract, got {type(f).__name__}")
        key = spec if isinstance(spec, str) else _without_reference(spec)
        _REGISTERED.append((key, name or getattr(f, "__name__", repr(f)), f))
        return f

    return add if fn is None else add(fn)


def unregister_references(spec: MixerSpec | str) -> None:
    """Forget every reference registered for ``spec`` (a MixerSpec or a spec name)."""
    key = spec if isinstance(spec, str) else _without_reference(spec)
    _REGISTERED[:] = [r for r in _REGISTERED if r[0] != key]


def import_reference(path: str) -> Callable:
    """The function named by ``'package.module:function'`` (a spec's ``reference``), imported as Python
    imports any module: from PYTHONPATH or an installed package. No folder is added to ``sys.path``, so
    nothing is ever imported from a model folder or a Hub download."""
    module, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ImportError(f"reference {path!r}: cannot import module {module!r} ({exc}); it must be importable "
                          f"from PYTHONPATH or an installed package (verify adds no folder to sys.path)") from exc
    except AttributeError:
        raise ImportError(f"reference {path!r}: module {module!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise TypeError(f"reference {path!r} is a {type(fn).__name__}, not a function with the op contract")
    return fn


def user_references(spec: MixerSpec) -> list[tuple[str, Callable]]:
    """(label, fn) of every hand-written rule the user gave for ``spec``: the one its ``reference`` names,
    then those registered for an equal spec or for its name (``register_reference``)."""
    found = [] if spec.reference is None else [(spec.reference, import_reference(spec.reference))]
    bare = _without_reference(spec)
    return found + [(label, fn) for key, label, fn in _REGISTERED
                    if (key == spec.name if isinstance(key, str) else key == bare)]


def _without_reference(spec: MixerSpec) -> MixerSpec:
    return spec if spec.reference is None else spec.model_copy(update={"reference": None})
