"""Retention regularizers R(M, M_{t−1}): what keeps the memory stable (thesis §2.4.3).

``penalty(state, prev, alpha, lr)`` returns a scalar for one head. The L2 decay
is scaled so that ONE gradient step with learning rate η_t gives exactly the
multiplicative gate α_t:

    R = Σ (1 − α_t) / (2 η_t) · ‖M‖²      ⇒      M − η_t ∇R = α_t M

with α a scalar per head (``gate="scalar"`` or ``"fixed"``), one value per
key row of S ∈ R^{K×V} (``gate="key"``, GLA) or one value per entry of S (``gate="entry"``:
Mamba's selective SSM, α_{t,n,d} = exp(Δ_{t,d} A_{d,n}), each value channel d a diagonal state
over the keys n). This is eq. 2.51 with λ_t η_t = 1 − α_t.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from .memory import State, Axis
from .optimizer import rows


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
    gate: Literal["scalar", "key", "fixed", "entry"] = Field(
        "scalar",
        description="scalar: data-dependent α per head (Mamba2, GDN); key: per-key-row α (GLA); "
        "fixed: a constant γ per head (RetNet); entry: one α per entry of S ∈ R^{K×V} (Mamba's selective "
        "SSM: exp(Δ_{t,d} A_{d,n}) for key n and value channel d)",
    )

    def penalty(self, state: State, prev: State, alpha: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        coef = (1.0 - alpha) / (2.0 * lr)  # (), [K] or [K, V] (gate="entry")
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


class L1(Axis):
    """Sparsity retention R = λ‖M − M_{t−1}‖₁ (thesis §2.4.3): each write changes few entries.

    Not differentiable at M_{t−1}, so the gd optimizer takes it by its proximal map (one
    proximal-gradient step, ISTA): with the gradient step M' = M_{t−1} − η_t ∇ℓ(M_{t−1}),

        M_t = M_{t−1} + soft(−η_t ∇ℓ(M_{t−1}), η_t λ),   soft(x, τ) = x − clamp(x, −τ, τ)
            = sign(x) · max(|x| − τ, 0)

    so an entry of the update smaller than η_t λ is dropped and larger ones shrink by η_t λ.
    λ = 0 is the gd step bit for bit (soft(x, 0) = x − 0).
    """

    kind: Literal["l1"] = "l1"
    lam: float = Field(..., ge=0.0, description="strength λ ≥ 0 of the ℓ1 penalty on the change of the memory")

    def penalty(self, state: State, prev: State, alpha, lr) -> torch.Tensor:
        return self.lam * sum((s - p).abs().sum() for s, p in zip(state, prev))

    def shrink(self, change: State, lr: torch.Tensor) -> State:
        """The prox of η R on the change of the memory: soft(ΔM, η λ) per entry, ΔM = M − M_{t−1}.

        lr: η_t, a scalar (or [K], one per key row of S)."""
        return tuple(d - torch.clamp(d, -self.lam * rows(lr, d), self.lam * rows(lr, d)) for d in change)


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


Retention = NoRetention | L2Decay | Proximal | L1 | KL | Window
