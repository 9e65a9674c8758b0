"""Memory representations: the hypothesis space M of the online objective.

    M_t = argmin_{M ∈ M}  ℓ(M; k_t, v_t) + R(M, M_{t-1}),      o_t = f_{M_t}(q_t)

Each memory knows its per-head state (a tuple of tensors, the pytree that the
optimizer updates), its retrieval map f_M and its size in floats. The math
here is written for ONE head of ONE sequence (unbatched); ``derive`` vmaps it
over batch and heads.

Layout: a matrix state is S ∈ R^{K×V} with f_S(k) = Sᵀk (the thesis writes
M = Sᵀ ∈ R^{V×K}, f_M(k) = M k; both describe the same map).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

State = tuple[torch.Tensor, ...]


class Axis(BaseModel):
    """Base of every axis value (memory, bias, retention, optimizer): immutable, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite


class Matrix(Axis):
    """Linear memory S ∈ R^{K×V}; f_S(k) = Sᵀk (linear attention, DeltaNet, ...).

    ``norm="layernorm_residual"`` gives TTT-Linear's f_S(k) = k + LN(Sᵀk)
    (requires K == V).
    """

    kind: Literal["matrix"] = "matrix"
    norm: Literal["none", "layernorm_residual"] = Field(
        "none", description="'layernorm_residual': f(k) = k + LayerNorm(Sᵀk), as in TTT-Linear."
    )

    def init_state(self, K: int, V: int, like: torch.Tensor) -> State:
        return (like.new_zeros(K, V),)

    def predict(self, state: State, k: torch.Tensor) -> torch.Tensor:
        """f_S(k): [K] -> [V]."""
        out = k @ state[0]
        if self.norm == "layernorm_residual":
            out = k + F.layer_norm(out, out.shape[-1:], eps=1e-6)
        return out

    def state_floats(self, K: int, V: int) -> int:
        return K * V


class Diagonal(Axis):
    """Elementwise memory s ∈ R^{D}; f_s(k) = s ⊙ k (requires K == V)."""

    kind: Literal["diagonal"] = "diagonal"

    def init_state(self, K: int, V: int, like: torch.Tensor) -> State:
        return (like.new_zeros(V),)

    def predict(self, state: State, k: torch.Tensor) -> torch.Tensor:
        return state[0] * k

    def state_floats(self, K: int, V: int) -> int:
        return V


class MLP(Axis):
    """Two-layer MLP memory (TTT-MLP, Titans deep memory): the weights are the state.

    f_W(k) = k + act(k W₁) W₂ when K == V (residual), else act(k W₁) W₂.
    The default initial state is W₁ = the first ``hidden`` columns of a scaled
    identity-like orthogonal block, W₂ = 0, so f starts at the identity map and
    the first gradient is nonzero; pass ``initial_state`` to start elsewhere.
    """

    kind: Literal["mlp"] = "mlp"
    hidden: int = Field(..., gt=0, description="hidden width of the memory MLP")
    act: Literal["gelu", "silu", "relu", "tanh"] = "gelu"

    def init_state(self, K: int, V: int, like: torch.Tensor) -> State:
        w1 = like.new_zeros(K, self.hidden)
        n = min(K, self.hidden)
        w1[:n, :n] = torch.eye(n, dtype=like.dtype, device=like.device)
        return (w1, like.new_zeros(self.hidden, V))

    def predict(self, state: State, k: torch.Tensor) -> torch.Tensor:
        w1, w2 = state
        act = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu, "tanh": torch.tanh}[self.act]
        out = act(k @ w1) @ w2
        return k + out if out.shape[-1] == k.shape[-1] else out

    def state_floats(self, K: int, V: int) -> int:
        return K * self.hidden + self.hidden * V


class NonParametric(Axis):
    """The memory is the data: a KV cache {(k_i, v_i)} (softmax attention).

    ``window=None`` keeps everything (state grows as O(T)); ``window=w`` keeps
    the last w pairs (sliding-window attention). Read-out is the bias's
    closed-form argmin over the cache (Nadaraya–Watson for softmax).
    """

    kind: Literal["nonparametric"] = "nonparametric"
    window: int | None = Field(None, gt=0, description="keep only the last `window` key-value pairs")

    def state_floats(self, K: int, V: int, seq_len: int = 1) -> int:
        n = seq_len if self.window is None else min(seq_len, self.window)
        return n * (K + V)


class Spectral(Axis):
    """Complex elementwise spectral memory of SeqCond Attention (Nautile §2.2).

    Per head, S ∈ C^{D×M}: the (weighted) empirical characteristic function of
    the prefix sampled at M learned points θ. Held as the sufficient statistics
    of its closed-form optimum, (den = Σ p, num = Σ p·v·e^{iφ}) with num stored
    as [D, M, 2] (re, im); the normalised state is num / max(den, den_floor).
    """

    kind: Literal["spectral"] = "spectral"
    points: int = Field(2, gt=0, description="M, spectral points per channel")
    den_floor: float = Field(1e-4, gt=0, description="floor on Σp before normalising (authors' code: 1e-4)")

    def state_floats(self, K: int, V: int) -> int:
        return 1 + V * self.points * 2


Memory = Matrix | Diagonal | MLP | NonParametric | Spectral
