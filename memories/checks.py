"""Which gates a spec takes, call-time validation of op inputs, and the compute dtype of an op.

Errors name the argument, what was given and what is allowed.

The dtype rule of every op (the derived step here, every functional op in mixers/ops, whose
contract.py states it for the op families): the inputs may come in different float dtypes (as
``torch.autocast`` on CUDA hands them over: q, k float32 after a norm, v bfloat16 after a linear or
a convolution, gates either). The op computes in ONE dtype, ``compute_dtype``: the promotion of all
its float inputs (``torch.promote_types``), raised to float32 when it is a half type (bf16/fp16) and
the op accumulates a state. Each input is cast to it once, at the op's entry. Integer, bool and
complex inputs are refused (``check_float``), naming the argument.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import torch

from .bias import RemoveReplace
from .memory import NonParametric, Spectral
from .optimizer import GD, Momentum
from .retention import L2Decay


@dataclass(frozen=True)
class GateNeeds:
    """The keyword inputs a spec's op takes."""

    log_alpha: Literal["scalar", "key", "entry"] | None  # required when not None
    eta: bool  # Momentum: optional per-token momentum decay
    spectral: bool  # theta and weights required; q is [B,T,H,D,M,2]
    nonparametric: bool
    beta_key: bool = False  # beta is [B, T, H, K] (GD(rate="key")) instead of [B, T, H]
    removal_key: bool = False  # removal_key [B, T, H, K] required (RemoveReplace bias)


def gate_needs(spec) -> GateNeeds:
    r, o = spec.retention, spec.optimizer
    la = ({"key": "key", "entry": "entry"}.get(r.gate, "scalar")) if isinstance(r, L2Decay) else None
    return GateNeeds(la, isinstance(o, Momentum), isinstance(spec.memory, Spectral),
                     isinstance(spec.memory, NonParametric), beta_key=isinstance(o, GD) and o.rate == "key",
                     removal_key=isinstance(spec.bias, RemoveReplace))


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what an op accepts
HALF_DTYPES = (torch.float16, torch.bfloat16)
ACCEPTED = "float16, bfloat16, float32 or float64"


def _tensors(xs) -> list[torch.Tensor]:
    """The tensors among xs (None skipped; tuples and lists, e.g. a state pytree, opened)."""
    out = []
    for x in xs:
        if isinstance(x, (tuple, list)):
            out.extend(_tensors(x))
        elif torch.is_tensor(x):
            out.append(x)
    return out


def compute_dtype(*xs, accumulate: bool = True) -> torch.dtype:
    """The dtype an op computes in, from its float inputs ``xs`` (tensors, None, or tuples of tensors):
    their promotion, raised to float32 when it is bf16/fp16 and ``accumulate`` (the op sums a state).

    {float32, bfloat16} -> float32; {bfloat16} -> float32 (bfloat16 with accumulate=False);
    {float64, float32} -> float64."""
    dtypes = [t.dtype for t in _tensors(xs) if t.dtype in FLOAT_DTYPES]
    if not dtypes:
        raise TypeError("compute_dtype: no float tensor among the inputs")
    dtype = functools.reduce(torch.promote_types, dtypes)
    return torch.float32 if accumulate and dtype in HALF_DTYPES else dtype


def check_float(name: str, x, layout: str = "", *, fn: str = "") -> None:
    """Refuse a non-tensor or a tensor of a dtype other than float16/bfloat16/float32/float64 (integer,
    bool, complex), naming the op ``fn`` (if given), the argument and its layout."""
    where = f"{fn}: " if fn else ""
    layout = f" {layout}" if layout else ""
    if not torch.is_tensor(x):
        raise TypeError(f"{where}{name} must be a torch.Tensor{layout}, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{where}{name}{layout} must have a floating dtype ({ACCEPTED}; the arguments may "
                        f"differ in dtype), got {x.dtype}")


def _shape(name: str, t: torch.Tensor | None, want: tuple, allowed: str) -> None:
    if t is None:
        return
    check_float(name, t)
    if tuple(t.shape) != tuple(want):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {allowed} = {tuple(want)}")


def _forbid(name: str, value, why: str) -> None:
    if value is not None:
        raise ValueError(f"{name} was given but {why}")


def check_inputs(needs: GateNeeds, q, k, v, *, log_alpha, beta, eta, theta, weights, initial_state,
                 removal_key=None) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float(name, t)
    if needs.spectral:
        if q.dim() != 6 or q.shape[-1] != 2:
            raise ValueError(f"q has shape {tuple(q.shape)}; a spectral memory expects [B, T, H, D, M, 2]")
        B, T, H, D, M, _ = q.shape
        _shape("k", k, (B, T, H, D), "[B, T, H, D]")
        _shape("v", v, (B, T, H, D), "[B, T, H, D]")
        for name, t in (("theta", theta), ("weights", weights)):
            if t is None:
                raise ValueError(f"{name} is required for a spectral memory: shape [H, D, M]")
            _shape(name, t, (H, D, M), "[H, D, M]")
    else:
        if q.dim() != 4:
            raise ValueError(f"q has shape {tuple(q.shape)}; expected [B, T, H, K]")
        B, T, H, K = q.shape
        _shape("k", k, (B, T, H, K), "[B, T, H, K] like q")
        if v.dim() != 4 or tuple(v.shape[:3]) != (B, T, H):
            raise ValueError(f"v has shape {tuple(v.shape)}; expected [B, T, H, V] with B, T, H of q {(B, T, H)}")
        _forbid("theta", theta, "only a spectral memory takes theta")
        _forbid("weights", weights, "only a spectral memory takes weights")
    if needs.beta_key:
        _shape("beta", beta, (B, T, H, q.shape[-1]), "[B, T, H, K] (optimizer rate='key')")
    else:
        _shape("beta", beta, (B, T, H), "[B, T, H]")
    if needs.removal_key:
        if removal_key is None:
            raise ValueError("removal_key is required by the remove_replace bias: shape [B, T, H, K]")
        _shape("removal_key", removal_key, (B, T, H, q.shape[-1]), "[B, T, H, K] like k")
    else:
        _forbid("removal_key", removal_key, "only the remove_replace bias takes a removal key")
    if needs.log_alpha is None:
        _forbid("log_alpha", log_alpha, "this spec has no decay gate (retention is not l2_decay)")
    elif log_alpha is None:
        shape = {"key": "[B, T, H, K]", "entry": "[B, T, H, K, V]"}.get(needs.log_alpha, "[B, T, H]")
        raise ValueError(f"log_alpha is required by l2_decay retention: shape {shape}")
    elif needs.log_alpha == "entry":
        _shape("log_alpha", log_alpha, (B, T, H, q.shape[-1], v.shape[-1]), "[B, T, H, K, V] (gate='entry')")
    elif needs.log_alpha == "key":
        _shape("log_alpha", log_alpha, (B, T, H, q.shape[-1]), "[B, T, H, K] (gate='key')")
    else:
        _shape("log_alpha", log_alpha, (B, T, H), "[B, T, H] (gate='scalar'/'fixed')")
    if not needs.eta:
        _forbid("eta", eta, "only the momentum optimizer takes eta")
    _shape("eta", eta, (B, T, H), "[B, T, H]")
    if initial_state is not None and needs.nonparametric:
        if len(initial_state) != 2 or initial_state[0].shape[:2] != (B, H):
            raise ValueError("initial_state of a nonparametric memory is (keys [B, H, N, K], values [B, H, N, V])")
