"""Wiola's attention layer (seed 002): softmax attention (mixers/attention.py) with SRPE, GCLA, ATM
and the sigmoid output gate, each off unless given (``WiolaAttentionOptions``).

    srpe          the rotary map is SRPE: RoPE's rotation with (cos, sin) scaled by a radial factor and
                  every frequency × (1 + 1/k_s) (eqs. 11–18, srpe.py; base: the layer's rope_theta)
    output_gate   o ← σ(x W_gate) ⊙ o before W_o                                            (eqs. 28–29)
    cross_layer   GCLA: o ← (1 − β) o + β · attention(q, summaries of the residual streams entering
                  this and the previous layer) (eqs. 20–27, gcla.py). The block passes the streams
                  (``cross_layer_streams`` of them, newest last). Mode ``as_written`` (mean over all T)
                  refuses a cache; ``causal`` keeps running sums in the state.
    token_merge   ATM, in training mode only (Algorithm 1, atm.py). ``as_written``: adjacent tokens
                  with cosine > τ are averaged before the projections, the second token of each pair
                  is masked like padding (positions count merged tokens), and its output is copied
                  from its pair's; ``causal``: keys and values of the pair are averaged after the
                  rotation, a merged slot visible once both its tokens are in the past. A cache
                  cannot be continued in training mode with ATM on.

    x̃, keep = merge(x)                       (as-written ATM in training; else x̃ = x)
    o = attention(heads(x̃))                  (causal ATM in training: over merged key/value slots)
    o ← (1 − β) o + β o_ctx                   (GCLA)
    y = unmerge((σ(x̃ W_gate) ⊙ o) W_o)

A model gets it through the block extension ``wiola_attention`` (models/extensions.py) on layers
whose spec is softmax attention; its decode state is ``WiolaAttentionState``.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch
import torch.nn as nn
from pydantic import BaseModel, ConfigDict, Field

from ..attention import Attention
from ..boundary import check_mixer_input
from .atm import ATMOptions, causal_merged_attention, merge_starts, merge_tokens, unmerge
from .gcla import AS_WRITTEN_NO_CACHE, ContextState, CrossLayerContext, GCLAOptions
from .srpe import SRPEOptions, srpe_angles

ATM_NO_CACHE = ("token merging (ATM) runs in training mode only and merges across the whole call; a cache "
                "cannot be continued while it is on (Wiola §VIII-D: ATM is off at inference). Call model.eval() "
                "to decode, or drop token_merge.")


class WiolaAttentionOptions(BaseModel):
    """What Wiola adds to a softmax-attention layer (module docstring); each off by default."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    srpe: SRPEOptions | None = Field(None, description="Wiola's spiral rotary map SRPE {k_s, a_s, f_s} instead of "
                                     "RoPE (srpe.py; base: the layer's rope_theta)")
    output_gate: bool = Field(False, description="sigmoid output gate o ⊙ σ(x W_gate) before W_o (eqs. 28–29)")
    cross_layer: GCLAOptions | None = Field(
        None, description="GCLA: blend with attention over summaries of the residual streams entering this and "
        "the previous layer ({mode: as_written | causal}; gcla.py)")
    token_merge: ATMOptions | None = Field(
        None, description="ATM, in training mode only: merge adjacent tokens whose cosine exceeds tau "
        "({mode: as_written | causal, tau}; atm.py)")


class WiolaAttentionState(NamedTuple):
    """The decode state: AttentionState's fields, then the running sums of causal GCLA (or None)."""

    keys: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor
    pos: torch.Tensor
    conv: torch.Tensor | None
    context: ContextState | None


class WiolaAttention(Attention):
    """Attention with Wiola's options (module docstring); the other arguments are Attention's."""

    def __init__(self, d_model: int, *, srpe: SRPEOptions | None = None, output_gate: bool = False,
                 cross_layer: GCLAOptions | None = None, token_merge: ATMOptions | None = None, **attention):
        if token_merge is not None and attention.get("window") is not None:
            raise ValueError("token_merge (ATM) with a sliding window is not supported; drop one of them")
        if token_merge is not None and attention.get("short_conv"):
            raise ValueError("token_merge (ATM) with short_conv is not supported (the conv would run over merged "
                             "tokens); drop one of them")
        if srpe is not None:
            attention["rope"] = True  # SRPE is the rotary map
        super().__init__(d_model, **attention)
        self.srpe, self.token_merge = srpe, token_merge
        self.gate_proj = nn.Linear(d_model, self.H * self.V, bias=False) if output_gate else None  # W_gate
        self.context = None if cross_layer is None else CrossLayerContext(
            d_model, cross_layer, num_heads=self.H, num_kv_heads=self.Hkv, head_dim=self.K, value_dim=self.V)
        self.cross_layer_streams = 0 if cross_layer is None else cross_layer.summaries  # read by models/blocks.py

    def state_size(self, seq_len: int = 1) -> int:
        """Attention's cache, plus the running sums and count of causal GCLA."""
        context = 0
        if self.context is not None and self.context.options.mode == "causal":
            context = self.cross_layer_streams * self.context.k_ctx.in_features + 1
        return super().state_size(seq_len) + context

    def angles(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if self.srpe is None:
            return super().angles(pos, dtype)
        return srpe_angles(pos, self.K, self.rope_theta, self.srpe, dtype)

    def forward(self, x: torch.Tensor, *, state: WiolaAttentionState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True, streams: list[torch.Tensor] | None = None):
        """x [B, T, d_model]; mask [B, T] bool (True = real token) or None; streams: the residual
        streams entering this layer and the previous ones, newest last (needed by GCLA only).

        Returns (y [B, T, d_model], WiolaAttentionState or None).
        """
        check_mixer_input("WiolaAttention", x, self.q_proj.in_features, mask)
        B, T, _ = x.shape
        if state is not None and self.context is not None and self.context.options.mode == "as_written":
            raise ValueError(AS_WRITTEN_NO_CACHE)
        starts = self._merge_starts(x, mask, state)
        written_merge = starts is not None and self.token_merge.mode == "as_written"
        mask_att = mask
        if written_merge:  # eq. 31: pair starts hold the average, second tokens are masked out
            x, keep = merge_tokens(x, starts)
            mask_att = keep if mask is None else keep & mask.bool()
        heads = self.heads(x, mask_att, state)
        op = partial(causal_merged_attention, starts=starts) if starts is not None and not written_merge else None
        o, attention_state = self.attend(heads, mask_att, state, return_state, op)
        context = None
        if self.context is not None:
            o, context = self.context(o, heads.q, self._streams(streams), scale=self.scale, mask=mask,
                                      state=None if state is None else state.context)
        if self.gate_proj is not None:
            o = o * torch.sigmoid(self.gate_proj(x)).view_as(o)  # eq. 28
        y = self.o_proj(o.reshape(B, T, self.H * self.V))
        if written_merge:
            y = unmerge(y, starts)  # eq. 32
        return y, (None if attention_state is None else WiolaAttentionState(*attention_state, context))

    def _merge_starts(self, x: torch.Tensor, mask, state) -> torch.Tensor | None:
        """ATM's pair starts [B, T] in training mode (None when token merging is off)."""
        if self.token_merge is None or not self.training:
            return None
        if state is not None:
            raise ValueError(ATM_NO_CACHE)
        return merge_starts(x, self.token_merge.tau, mask)

    def _streams(self, streams: list[torch.Tensor] | None) -> list[torch.Tensor]:
        if not streams:
            raise ValueError("this attention layer has cross_layer (GCLA) on: forward needs streams=[..., X_prev, "
                             "X_this], the residual streams entering the previous layers and this one (the "
                             "model's blocks pass them)")
        return list(streams)[-self.cross_layer_streams:]
