"""lower(spec): choose an executable form of a spec from its algebra.

The rules are explicit (ARCHITECTURE.md, "lower"), read off the spec's axes by
``algebra_class``, never guessed numerically and never switched silently by
sequence length or environment:

    class          forms (first = auto)                     hand-written family
    hebbian        chunk, recurrent                          ops/hebbian.py
    delta          chunk, recurrent                          ops/delta.py
    diag_rank1     chunk, recurrent                          ops/delta.py (joint)
    spectral       prefix_sum, masked_matmul, recurrent      ops/spectral.py
    nonparametric  sdpa, recurrent                           ops/attention.py
    scan           scan, recurrent, chunk_approx (opt-in)    derive() compiled / ops/chunk_approx.py

"recurrent" is the hand-written recurrence where the class has one, else the
derived step. Every form has the op contract of the class.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from assocmem.memories import Implicit, derive

from .references import with_lr
from .spec import MixerSpec

FORMS: dict[str, tuple[str, ...]] = {
    "hebbian": ("chunk", "recurrent"),
    "delta": ("chunk", "recurrent"),
    "diag_rank1": ("chunk", "recurrent"),
    "spectral": ("prefix_sum", "masked_matmul", "recurrent"),
    "nonparametric": ("sdpa", "recurrent"),
    "scan": ("scan", "recurrent", "chunk_approx"),
}
APPROXIMATE = frozenset({"chunk_approx"})  # never chosen by "auto"


@dataclass(frozen=True)
class Form:
    """An executable form: ``fn`` has the op contract of the spec's class."""

    name: str
    cls: str
    fn: Callable
    exact: bool

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def available_forms(spec: MixerSpec) -> list[str]:
    return list(FORMS[spec.algebra])


def lower(spec: MixerSpec, form: str = "auto") -> Form:
    """The requested form of ``spec`` ("auto" = the fastest exact one for its class)."""
    cls = spec.algebra
    forms = FORMS[cls]
    name = forms[0] if form == "auto" else form
    if name not in forms:
        raise ValueError(
            f"form {form!r} is not available for {spec.name or 'this spec'}: its class is {cls!r} "
            f"({_why(cls, name)}); available forms: {list(forms)}"
        )
    fn = _build(spec, cls, name)
    if cls in ("hebbian", "delta", "diag_rank1"):
        fn = with_lr(fn, getattr(spec.optimizer, "lr", 1.0))
    return Form(name, cls, fn, exact=name not in APPROXIMATE)


def _why(cls: str, name: str) -> str:
    if name in ("chunk", "prefix_sum", "sdpa", "masked_matmul"):
        return f"a {name} form needs the algebra of another class, which this spec's axes do not have"
    if name == "chunk_approx":
        return "chunk_approx is only offered where no exact parallel form exists (class 'scan')"
    return "unknown form name"


def _build(spec: MixerSpec, cls: str, name: str) -> Callable:
    if cls == "scan":
        if name == "chunk_approx":
            from .ops.chunk_approx import chunk_approx_scan

            return functools.partial(chunk_approx_scan, spec)
        return _derived(spec, compile=name == "scan")
    if cls == "hebbian":
        from .ops import hebbian

        return hebbian.chunk_hebbian if name == "chunk" else hebbian.recurrent_hebbian
    if cls in ("delta", "diag_rank1"):
        return _delta_form(spec, cls, name)
    if cls == "spectral":
        from .ops import spectral

        fn = {"prefix_sum": spectral.prefix_sum_spectral, "masked_matmul": spectral.masked_matmul_spectral,
              "recurrent": spectral.recurrent_spectral}[name]
        return functools.partial(fn, den_floor=spec.memory.den_floor)
    from assocmem.memories import window_of

    from .ops import attention

    fn = attention.sdpa_softmax_attention if name == "sdpa" else attention.recurrent_softmax_attention
    return functools.partial(fn, window=window_of(spec))


def _delta_form(spec: MixerSpec, cls: str, name: str) -> Callable:
    from .ops import delta

    chunk = name == "chunk"
    if cls == "diag_rank1":
        return delta.chunk_delta_rule_joint if chunk else delta.recurrent_delta_rule_joint
    if isinstance(spec.optimizer, Implicit):
        return delta.chunk_longhorn if chunk else delta.recurrent_longhorn
    return delta.chunk_delta_rule if chunk else delta.recurrent_delta_rule


def _derived(spec: MixerSpec, compile: bool) -> Callable:
    from assocmem.memories.derive import RecurrentStep

    derive(spec)  # validates the axes
    return RecurrentStep(spec, compile=compile)
