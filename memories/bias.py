"""Attentional biases ℓ(M; k, v): what a good association is.

Each ``loss(pred, v)`` takes the retrieval pred = f_M(k) ∈ R^V of one head and
the target v ∈ R^V and returns a scalar (thesis §2.4.2). Read-time biases
(Nadaraya–Watson, characteristic function) define the objective that the
closed-form optimizer minimises instead.
"""
from __future__ import annotations

import warnings
from typing import Literal

import torch
from pydantic import Field, model_validator

from .memory import Axis


class DotProduct(Axis):
    """ℓ = −⟨f_M(k), v⟩ (eq. 2.44): Hebbian; GD gives M_t = M_{t−1} + β v kᵀ."""

    kind: Literal["dot_product"] = "dot_product"

    def loss(self, pred: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return -(pred * v).sum()


class L2(Axis):
    """ℓ = ½‖f_M(k) − v‖² (eq. 2.45): online regression; GD gives the delta rule."""

    kind: Literal["l2"] = "l2"

    def loss(self, pred: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return 0.5 * (pred - v).pow(2).sum()


class RemoveReplace(Axis):
    """ℓ = ½‖f_M(κ)‖² − ⟨f_M(k), v⟩: erase what the removal key κ retrieves, write v at the
    replacement key k (RWKV-7's separate removal key; Peng et al. 2025).

    One GD step with a per-key rate a_t (``GD(rate="key")``) and the per-key decay gives RWKV-7's
    diagonal-plus-low-rank write, S = Mᵀ ∈ R^{K×V}:

        S_t = (diag(α_t) − (a_t ⊙ κ_t) κ_tᵀ) S_{t−1} + (a_t ⊙ k_t) v_tᵀ

    With κ = k it is the ℓ2 bias up to the constant ½‖v‖² (the same gradient): Table 2.1's
    (diag(α_t) − β_t k_t k_tᵀ) M + β_t v_t k_tᵀ. The removal key is an extra input of the op
    (``removal_key`` [B, T, H, K]).
    """

    kind: Literal["remove_replace"] = "remove_replace"

    def loss(self, pred: torch.Tensor, v: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
        """pred = f_M(k), removed = f_M(κ): [V] each."""
        return 0.5 * removed.pow(2).sum() - (pred * v).sum()


def settled_error(p: float) -> float:
    """(2/p)^{1/(p−2)}: the error size at which one ℓp step with β‖k‖² = 1 moves e to −e (p·|e|^{p−2} = 2).
    Above it (p > 2) or below it (p < 2) a plain ℓp step overshoots; ``Lp`` bounds the step there."""
    return (2.0 / p) ** (1.0 / (p - 2.0))


class Lp(Axis):
    """ℓ = ‖f_M(k) − v‖_p^p (Moneta-style, eq. 2.46 up to its ½); ∇ = p·sign(e)|e|^{p−1} kᵀ, e = f(k) − v.

    With ``clip`` = c, each coordinate's loss is |e|^p up to |e| = c and continues along its tangent
    beyond (c^p + p c^{p−1}(|e| − c), a Huber-style ℓp), so ∇ = p·sign(e)·min(|e|, c)^{p−1} kᵀ.

    When plain ℓp steps diverge (p > 2): one GD step with ‖k‖ = 1 and step β moves each error
    coordinate to e' = e − β p sign(e)|e|^{p−1}, which overshoots (|e'| > |e|) once β p |e|^{p−2} > 2,
    and then grows without bound (|e'| ≈ β p |e|^{p−1}): unit-scale values with β near 1 are enough.
    With a clip the step is at most β p c^{p−1}, so every |e| stays bounded for any finite c; with
    p c^{p−2} ≤ 2, i.e. c ≤ (2/p)^{1/(p−2)} (2/3 for p = 3), no step increases |e| while β ≤ 1.

    Why p < 2 gives NaN gradients, and ``eps``: the thesis motivates ℓp by robustness to outliers
    (eq. 2.46: "a well-known drawback to the ℓ2 loss is its sensitivity to outliers"), which is p < 2.
    There ℓ is C¹ (g(e) = p·sign(e)|e|^{p−1} → 0 at e = 0) but g's slope p(p−1)|e|^{p−2} is unbounded as
    e → 0, and training differentiates through the write, so the gradient of a loss through the memory
    carries that slope: at e = 0 exactly, autograd computes ∞·0 = NaN (a zero residual coordinate is
    enough), and near it gradients of size |e|^{p−2}. No finite value at 0 fixes the neighbourhood, so
    ``eps`` = ε replaces the loss below |e| = ε by the quadratic with the same value and slope at ε,
    (p/2) ε^{p−2} e² + (1 − p/2) ε^p, i.e. g(e) = p ε^{p−2} e there (a delta-rule step of rate p ε^{p−2}),
    which bounds g's slope by p ε^{p−2}. For p < 2 ``eps`` defaults to (2/p)^{1/(p−2)} (0.5625 for p = 1.5),
    the smallest ε whose inner step never overshoots (p ε^{p−2} ≤ 2 with β‖k‖² ≤ 1); a smaller ε keeps
    more of ℓp and allows slopes up to p ε^{p−2}. ``eps: null`` asks for plain ℓp and warns.
    """

    kind: Literal["lp"] = "lp"
    p: float = Field(..., gt=1.0, le=32.0, description="exponent 1 < p ≤ 32 (p = 1 is not differentiable at 0; "
                     "beyond 32, |e|^(p−1) overflows float32 once |e| > e^(88.7/31) ≈ 17)")
    clip: float | None = Field(None, gt=0.0, description="error size c beyond which the loss continues linearly "
                               "(gradient p·sign(e)·min(|e|, c)^(p−1)); None = plain ℓp, which diverges for p > 2 "
                               "once β p |e|^(p−2) > 2 (see the class docstring)")
    eps: float | None = Field(None, gt=0.0, description="p < 2 only: error size ε below which the loss is the "
                              "quadratic with ℓp's value and slope at ε (gradient p ε^(p−2) e), so gradients stay "
                              "finite at e = 0; default for p < 2: (2/p)^(1/(p−2)) (0.5625 at p = 1.5); null = plain "
                              "ℓp, whose gradient is NaN at e = 0 (see the class docstring)")

    @model_validator(mode="before")
    @classmethod
    def _default_eps(cls, data):
        p = data.get("p") if isinstance(data, dict) else None
        if isinstance(p, (int, float)) and 1.0 < p < 2.0 and "eps" not in data:
            data = {**data, "eps": settled_error(float(p))}
        return data

    @model_validator(mode="after")
    def _eps_below_two(self) -> "Lp":
        if self.eps is not None and self.p >= 2.0:
            raise ValueError(f"lp eps smooths ℓp near e = 0 where p < 2 (g's slope p(p−1)|e|^(p−2) is unbounded "
                             f"there); with p = {self.p:g} the slope is bounded: leave eps unset")
        if self.eps is not None and self.clip is not None and self.eps >= self.clip:
            raise ValueError(f"lp eps = {self.eps:g} must be below clip = {self.clip:g} (quadratic below eps, "
                             f"ℓp between, linear beyond clip)")
        if self.eps is None and self.p < 2.0:
            warnings.warn(f"lp with p = {self.p:g} < 2 and eps: null: the gradient through the write is NaN where a "
                          f"residual coordinate is exactly 0 and unbounded near it (slope p(p−1)|e|^(p−2)); leave "
                          f"eps unset for its default {settled_error(self.p):.4g} or set a smaller eps", stacklevel=2)
        return self

    def loss(self, pred: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        e = pred - v
        a = e.abs()
        if self.clip is None and self.eps is None:
            return a.pow(self.p).sum()
        p, c, eps = self.p, self.clip, self.eps
        # |e|^p between eps and c, clamped on both sides so that neither pow nor its derivatives see 0 or overflow
        loss = a.clamp(min=eps, max=c).pow(p)
        if c is not None:
            loss = torch.where(a <= c, loss, c ** p + p * c ** (p - 1) * (a - c))
        if eps is not None:
            inner = 0.5 * p * eps ** (p - 2) * e.square() + (1 - 0.5 * p) * eps ** p  # e², not |e|²: slope p ε^(p−2) at 0
            loss = torch.where(a >= eps, loss, inner)
        return loss.sum()


class Huber(Axis):
    """Coordinate-wise Huber loss (Yaad-style); ∇ = clamp(e, −δ, δ) kᵀ."""

    kind: Literal["huber"] = "huber"
    delta: float = Field(1.0, gt=0.0, description="transition point δ between quadratic and linear")

    def loss(self, pred: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        a = (pred - v).abs()
        quad = 0.5 * a.pow(2)
        lin = self.delta * (a - 0.5 * self.delta)
        return torch.where(a <= self.delta, quad, lin).sum()


class NadarayaWatson(Axis):
    """Read-out objective of softmax attention over a KV cache (Table 2.1):

        o_t = argmin_o Σ_{i ≤ t} exp(s·qᵀk_i) · ½‖o − v_i‖²  =  Σ_i softmax_i(s·qᵀk) v_i
    """

    kind: Literal["nadaraya_watson"] = "nadaraya_watson"

    def objective(self, o: torch.Tensor, values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """o: [V]; values: [N, V]; weights: [N] (zero for masked entries)."""
        return 0.5 * (weights * (o.unsqueeze(0) - values).pow(2).sum(-1)).sum()


class CharacteristicFunction(Axis):
    """SCA's spectral bias (Nautile §2.2): ℓ(S; u, v) = ½‖S − v·e^{iφ}‖², φ = u ⊗ θ.

    Weighted by the contribution p_t and minimised in closed form over the
    prefix, S_t = Σ p_τ v_τ e^{iφ_τ} / Σ p_τ: the normalised empirical
    characteristic-function sample of the prefix. Complex numbers are held as
    a trailing (re, im) axis.
    """

    kind: Literal["characteristic_function"] = "characteristic_function"

    @staticmethod
    def target(u: torch.Tensor, v: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """u, v: [D]; theta: [D, M] -> v e^{iφ} as [D, M, 2]."""
        phase = u.unsqueeze(-1) * theta  # (D, M)
        amp = v.unsqueeze(-1)
        return torch.stack((amp * torch.cos(phase), amp * torch.sin(phase)), dim=-1)

    def loss(self, S: torch.Tensor, u: torch.Tensor, v: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        return 0.5 * (S - self.target(u, v, theta)).pow(2).sum()


Bias = DotProduct | L2 | RemoveReplace | Lp | Huber | NadarayaWatson | CharacteristicFunction
