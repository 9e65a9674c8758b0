"""Compiled chunk forms: the same group functions as the eager forms, fused by ``torch.compile``.

A chunk form runs over groups of whole chunks (``groups.py``); ``compile=True`` on a chunk op
(or ``lower(spec, "chunk", compile=True)``, or ``layer.compile``) runs each group through
``compiled(group_fn)``, inductor's fusion of the very function the eager form calls (C++/OpenMP
kernels on CPU, Triton on GPU), with three differences that make it traceable:

1. No in-place intermediates (``in_place=False``, the autograd path of the eager form): inductor
   plans its own buffers, and an in-place write into a view would be traced as a copy.
2. No data-dependent choice inside the graph: the hebbian form always takes its explicit
   (always-stable) intra-chunk path instead of choosing the factorised one from the decay's size,
   and the delta form never builds the no-grad fold plan (a host-side list of segments).
3. Islands (``island``): the autograd Functions whose loops write per-chunk slices of one buffer
   in place, with hand-written backwards, run eagerly between compiled graphs (the triangular
   solve and the carry of the delta forms, ``delta_carry.py``, and their no-grad carry
   ``carry_read``; the state carry of the hebbian form). Traced, each slice write would become a
   copy of the whole buffer per chunk (measured: a GDN group compiled whole ran 4-6x slower than
   eager). ``decay.segment_sums`` is an island too: its float64 differences are written straight
   into the compute dtype and its backward is hand-written, where the traced version ran as one
   slow generated kernel (GDN fwd+bwd: 0.73x eager traced, 0.96x as an island). These are the
   graph breaks of a compiled chunk form, one on each side of each island; everything between
   them is fused, forward and backward (AOTAutograd compiles the backward of each graph).
   ``assocmem bench breakdown --compiled`` lists the generated kernels by name with their time.

Shapes: one graph per (function, B, H, K, V, C, dtype, gate layout, grad mode). The time axis of
the group's inputs is marked dynamic (``torch._dynamo.maybe_mark_dynamic``), so a new sequence
length reuses the graph instead of compiling another (``tests/mixers/test_compiled.py`` counts
the compilations over a training run with varying T). The cache is the process's: the first call
of each graph compiles it (tens of seconds on a small CPU; ``assocmem bench mixers`` reports it).
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

__all__ = ["compiled", "island", "mark_time_dynamic"]

_COMPILED: dict[Callable, Callable] = {}


def compiled(fn: Callable) -> Callable:
    """``torch.compile(fn)``, once per function; a ``functools.partial`` keeps its bound constants
    (compiled is its function, re-bound), so every call of the same group function shares one cache."""
    if isinstance(fn, functools.partial):
        return functools.partial(compiled(fn.func), *fn.args, **fn.keywords)
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn)
    return _COMPILED[fn]


def island(fn: Callable) -> Callable:
    """``fn`` run eagerly, also when called from a compiled function (a graph break on each side)."""
    return torch.compiler.disable(fn, recursive=True)


def mark_time_dynamic(*xs: torch.Tensor | None) -> None:
    """Mark dim 1 (time) of each tensor dynamic for the compiled call that follows (None skipped)."""
    for x in xs:
        if x is not None:
            torch._dynamo.maybe_mark_dynamic(x, 1)
