"""Which gates a spec takes, and call-time validation of op inputs.

Errors name the argument, what was given and what is allowed.
"""
from __future__ import annotations

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

    log_alpha: Literal["scalar", "key"] | None  # required when not None
    eta: bool  # Momentum: optional per-token momentum decay
    spectral: bool  # theta and weights required; q is [B,T,H,D,M,2]
    nonparametric: bool
    beta_key: bool = False  # beta is [B, T, H, K] (GD(rate="key")) instead of [B, T, H]
    removal_key: bool = False  # removal_key [B, T, H, K] required (RemoveReplace bias)


def gate_needs(spec) -> GateNeeds:
    r, o = spec.retention, spec.optimizer
    la = ("key" if r.gate == "key" else "scalar") if isinstance(r, L2Decay) else None
    return GateNeeds(la, isinstance(o, Momentum), isinstance(spec.memory, Spectral),
                     isinstance(spec.memory, NonParametric), beta_key=isinstance(o, GD) and o.rate == "key",
                     removal_key=isinstance(spec.bias, RemoveReplace))


def _shape(name: str, t: torch.Tensor | None, want: tuple, allowed: str) -> None:
    if t is None:
        return
    if not torch.is_tensor(t):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if tuple(t.shape) != tuple(want):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {allowed} = {tuple(want)}")


def _forbid(name: str, value, why: str) -> None:
    if value is not None:
        raise ValueError(f"{name} was given but {why}")


def check_inputs(needs: GateNeeds, q, k, v, *, log_alpha, beta, eta, theta, weights, initial_state,
                 removal_key=None) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not torch.is_tensor(t) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
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
        raise ValueError(f"log_alpha is required by l2_decay retention: shape "
                         f"{'[B, T, H, K]' if needs.log_alpha == 'key' else '[B, T, H]'}")
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
