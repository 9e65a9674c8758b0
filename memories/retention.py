"""Retention regularizers R(M, M_{t−1}): what keeps the memory stable (thesis §2.4.3).

``penalty(state, prev, alpha, lr)`` returns a scalar for one head. The L2 decay
is scaled so that ONE gradient step with learning rate η_t gives exactly the
multiplicative gate α_t:

    R = Σ (1 − α_t) / (2 η_t) · ‖M‖²      ⇒      M − η_t ∇R = α_t M

with α a scalar per head (``gate="scalar"`` or ``"fixed"``) or one value per
key row of S ∈ R^{K×V} (``gate="key"``, GLA). This is eq. 2.51 with λ_t η_t = 1 − α_t.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from .memory import State, Axis


def _sq(state: State) -> list[torch.Tensor]:
    return [s.pow(2) for s in state]


class NoRetention(Axis):
    """R = 0: nothing is forgotten except what the bias overwrites."""

    kind: Literal["none"] = "none"

    def penalty(self, state: State, prev: State, alpha, lr) -> torch.Tensor:
        return state[0].new_zeros(())


class L2Decay(Axis):
    """Weight-decay retention (eq. 2.51) giving the forget gate α_t ∈ (0, 1]."""

    kind: Literal["l2_decay"] = "l2_decay"
    gate: Literal["scalar", "key", "fixed"] = Field(
        "scalar",
        description="scalar: data-dependent α per head (Mamba2, GDN); key: per-key-row α (GLA); "
        "fixed: a constant γ per head (RetNet)",
    )

    def penalty(self, state: State, prev: State, alpha: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        coef = (1.0 - alpha) / (2.0 * lr)  # () or [K]
        total = state[0].new_zeros(())
        for s in _sq(state):
            c = coef.reshape(coef.shape + (1,) * (s.dim() - coef.dim())) if coef.dim() else coef
            total = total + (c * s).sum()
        return total


class Proximal(Axis):
    """R = λ/2 ‖M − M_{t−1}‖² (eq. 2.47). Its gradient vanishes at M_{t−1}, so it
    only acts through an implicit (proximal) optimizer: Longhorn with β = 1/λ."""

    kind: Literal["proximal"] = "proximal"
    lam: float = Field(1.0, gt=0.0, description="strength λ of the proximal term")

    def penalty(self, state: State, prev: State, alpha, lr) -> torch.Tensor:
        return 0.5 * self.lam * sum((s - p).pow(2).sum() for s, p in zip(state, prev))


class KL(Axis):
    """KL retention for a normalised memory (each key row of S is a distribution
    over V). With ``GD`` this is one mirror-descent (exponentiated gradient) step:

        log S_t = α_t log S_{t−1} − η_t ∇ℓ(S_{t−1}) − logsumexp_V(·)     (Memora-style)
    """

    kind: Literal["kl"] = "kl"

    def penalty(self, state: State, prev: State, alpha, lr) -> torch.Tensor:
        return sum((s * (torch.log(s) - torch.log(p))).sum() for s, p in zip(state, prev)) / lr


class Window(Axis):
    """Keep only the last ``size`` associations (sliding-window attention).
    Valid for a NonParametric memory only."""

    kind: Literal["window"] = "window"
    size: int = Field(..., gt=0, description="number of most recent key-value pairs kept")


Retention = NoRetention | L2Decay | Proximal | KL | Window
