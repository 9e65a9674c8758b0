"""Gated Cross-Layer Attention, GCLA (Wiola, seed 002, §VII, eqs. 20–29): the cross-layer part.

The self-attention of a GCLA layer (eqs. 22–23, with SRPE and GQA) is the project's attention
layer; this file adds what GCLA puts around it:

    1. summaries  s⁽ℓ⁾ = mean over positions of X⁽ℓ⁺¹⁾ (eq. 20), the residual stream after
       layer ℓ; layer ℓ + 1 uses the Λ = 2 most recent ones, C⁽ℓ⁺¹⁾ = [s⁽ℓ⁻¹⁾; s⁽ℓ⁾] (eq. 21).
       Since X⁽ℓ⁺¹⁾ is the input of layer ℓ + 1, the context of layer m summarises the residual
       streams entering layers m − 1 and m: ``streams = [X⁽ᵐ⁻¹⁾, X⁽ᵐ⁾]``.
    2. K_ctx = C W_K^ctx, V_ctx = C W_V^ctx                     [Λ, Hkv·d_h]           (eqs. 24–25)
    3. O_ctx,h = softmax(Q̃_h K_ctx,gᵀ / √d_h) V_ctx,g            (Q̃ after SRPE)          (eq. 26)
    4. O_h = (1 − β) O_self,h + β O_ctx,h,  β = σ(φ), φ₀ = −3                               (eq. 27)
    (5. G = σ(X̃ W_gate), A = (G ⊙ O) W_O is the attention layer's sigmoid output gate, eqs. 28–29.)

Two modes of step 1 (``GCLAOptions.mode``):
  as_written  s = (1/T) Σ_{t ≤ T} X_t, the mean over *all* positions (eq. 20). Every output then
              depends on every input, future included: the causality probe flags it at position 0,
              and a decode step cannot compute it, so a call with a cache is refused.
  causal      s_t = (1/t) Σ_{τ ≤ t} X_τ, the prefix mean at each position. The decode state holds
              the running sums and the token count, so prefill + decode equals the full forward.

Conventions the paper leaves open: layer 0 has one stream to summarise (its input, the
embeddings), layer 1 and up have Λ = 2; padding tokens (mask False) are left out of the sums;
the context scores use the self-attention's scale (1/√d_h by default); kv head g serves query
heads h with g = h // (H / Hkv) (the project's GQA layout; the paper's g = h mod Hkv is a relabelling
of the query heads).
"""
from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn as nn
from pydantic import BaseModel, ConfigDict, Field


AS_WRITTEN_NO_CACHE = (
    "GCLA mode 'as_written' summarises each layer by its mean over all T positions (Wiola eq. 20), which needs "
    "the whole sequence: it cannot continue from a cache (decode). Use mode 'causal' (prefix means with running "
    "sums) to decode.")


class GCLAOptions(BaseModel):
    """The cross-layer context of an attention layer (eqs. 20–27)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    mode: Literal["as_written", "causal"] = Field(
        ..., description="summary of each layer: 'as_written' = mean over all T positions (eq. 20, sees the "
        "future, no decode); 'causal' = prefix mean up to each position (decodes with running sums)")
    summaries: int = Field(2, ge=1, description="Λ, number of preceding residual streams summarised (eq. 21)")
    phi_init: float = Field(-3.0, description="initial blend logit φ; β = σ(φ) (eq. 27), σ(−3) ≈ 0.047")


class ContextState(NamedTuple):
    """Causal-mode decode state: running sums of each summarised stream and the tokens counted.

    sums [B, Λ', d_model] (Λ' = number of streams of this layer), count [B] (real tokens so far).
    """

    sums: torch.Tensor
    count: torch.Tensor


def stream_summaries(streams: list[torch.Tensor], mode: str, *, mask: torch.Tensor | None = None,
                     state: ContextState | None = None) -> tuple[torch.Tensor, ContextState | None]:
    """Step 1. streams: Λ' tensors [B, T, d] -> C [B, T or 1, Λ', d] and the new causal state.

    as_written: C [B, 1, Λ', d], the mean over the real tokens of the whole call (eq. 20).
    causal: C [B, T, Λ', d], C[:, t] = (sums + Σ_{τ ≤ t} X_τ) / (count + #real tokens ≤ t).
    """
    x = torch.stack(streams, dim=2)  # [B, T, Λ', d]
    B, T = x.shape[:2]
    real = torch.ones(B, T, dtype=x.dtype, device=x.device) if mask is None else mask.to(x.dtype)
    if mode == "as_written":
        if state is not None:
            raise ValueError(AS_WRITTEN_NO_CACHE)
        total = (x * real[:, :, None, None]).sum(1, keepdim=True)        # [B, 1, Λ', d]
        return total / real.sum(1).clamp(min=1)[:, None, None, None], None
    sums = (x * real[:, :, None, None]).cumsum(1)                         # [B, T, Λ', d]
    count = real.cumsum(1)                                                # [B, T]
    if state is not None:
        if state.sums.shape != (B, x.shape[2], x.shape[3]):
            raise ValueError(f"GCLA state sums must be [B, Λ', d] = {[B, x.shape[2], x.shape[3]]}, "
                             f"got {list(state.sums.shape)}")
        sums = sums + state.sums[:, None]
        count = count + state.count[:, None]
    summaries = sums / count.clamp(min=1)[:, :, None, None]
    return summaries, ContextState(sums[:, -1], count[:, -1])


class CrossLayerContext(nn.Module):
    """Steps 2–4: blend a layer's self-attention output with attention over the summaries."""

    def __init__(self, d_model: int, options: GCLAOptions, *, num_heads: int, num_kv_heads: int, head_dim: int,
                 value_dim: int):
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
        self.options = options
        self.H, self.Hkv, self.K, self.V = num_heads, num_kv_heads, head_dim, value_dim
        self.k_ctx = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)   # W_K^ctx (eq. 24)
        self.v_ctx = nn.Linear(d_model, num_kv_heads * value_dim, bias=False)  # W_V^ctx (eq. 25)
        self.phi = nn.Parameter(torch.full((), float(options.phi_init)))       # β = σ(φ) (eq. 27)

    @property
    def beta(self) -> torch.Tensor:
        return torch.sigmoid(self.phi)

    def forward(self, o_self: torch.Tensor, q: torch.Tensor, streams: list[torch.Tensor], *, scale: float | None,
                mask: torch.Tensor | None = None, state: ContextState | None = None):
        """o_self [B, T, H, V], q [B, T, H, K] (after the rotary map), streams Λ' × [B, T, d]
        -> (O [B, T, H, V] of eq. 27, ContextState or None)."""
        if not 1 <= len(streams) <= self.options.summaries:
            raise ValueError(f"GCLA needs 1..{self.options.summaries} streams, got {len(streams)}")
        C, new_state = stream_summaries(streams, self.options.mode, mask=mask, state=state)  # 1. [B, T|1, Λ', d]
        B, Tc, L, _ = C.shape
        k = self.k_ctx(C).view(B, Tc, L, self.Hkv, self.K)                                   # 2. [B, T|1, Λ', Hkv, K]
        v = self.v_ctx(C).view(B, Tc, L, self.Hkv, self.V)
        rep = self.H // self.Hkv
        T = q.shape[1]
        k = k.repeat_interleave(rep, dim=3).expand(B, T, L, self.H, self.K)                   # [B, T, Λ', H, K]
        v = v.repeat_interleave(rep, dim=3).expand(B, T, L, self.H, self.V)                   # [B, T, Λ', H, V]
        s = self.K ** -0.5 if scale is None else scale
        weights = torch.softmax(torch.einsum("bthk,btlhk->bthl", q, k) * s, dim=-1)           # 3. [B, T, H, Λ']
        o_ctx = torch.einsum("bthl,btlhv->bthv", weights, v)                                  # [B, T, H, V]
        beta = self.beta
        return (1 - beta) * o_self + beta * o_ctx, new_state                                 # 4.
