"""Multi-head latent attention (MLA; DeepSeek-AI 2024, DeepSeek-V2 §2.1, eqs. 9–19).

Keys and values of all heads come from one low-rank latent per token, and the cache keeps the latent:

    c_KV = RMSNorm(h W_DKV)                  [B, T, d_c]      joint KV compression (eq. 9), cached
    k_C = c_KV W_UK,  v_C = c_KV W_UV        [B, T, H, d_h], [B, T, H, d_v]     (eqs. 10–11)
    c_Q = RMSNorm(h W_DQ),  q_C = c_Q W_UQ   [B, T, H, d_h]   (eqs. 12–13; q_C = h W_Q without q_rank)
    q_R = RoPE(c_Q W_QR)                     [B, T, H, d_R]   decoupled rotary query, per head (eq. 14)
    k_R = RoPE(h W_KR)                       [B, T, d_R]      decoupled rotary key, shared by the heads (eq. 15), cached
    o_h = Σ_j softmax_j([q_C;q_R]_h · [k_C;k_R]_j / √(d_h + d_R)) v_C,j,h      (eqs. 16–18)
    y = o W_O                                                 (eq. 19)

The RMSNorms on the two latents are those of DeepSeek's released layers (transformers'
``DeepseekV3Attention``: ``q_a_layernorm``, ``kv_a_layernorm``); the parameters carry that layer's names:
W_DKV and W_KR are the rows of ``kv_a_proj_with_mqa``, W_UK and W_UV the rows of ``kv_b_proj`` (per head
[d_h; d_v]), W_DQ = ``q_a_proj`` and [W_UQ; W_QR] = ``q_b_proj`` (per head [d_h; d_R]; ``q_proj`` without
q_rank). RoPE rotates the pairs (i, i + d_R/2) (mixers/norm.py); with ``rope_interleave`` (DeepSeek's
checkpoints) the rows of q_R and k_R come in pairs (2i, 2i + 1) and are first read into that layout
(even rows, then odd), as transformers' ``apply_rotary_pos_emb_interleave`` does, so the cache holds k_R
in the (i, i + d_R/2) layout either way.

Decode state (``LatentState``): c_KV and k_R of every token so far, d_c + d_R floats per token for all
heads together (multi-head attention keeps 2·H·d_h). A call reads it in one of two forms, equal up to
rounding:
    expanded   k_C, v_C of the cache rebuilt by W_UK, W_UV, then the attention op of the spec's form
               (sdpa or recurrent, mixers/ops/attention.py): prefill, and decode with latent.absorb off
    absorbed   W_UK folded into the query, q̃_h = W_UKᵀ q_C,h ∈ ℝ^{d_c}, scores q̃_h · c_KV,j + q_R,h · k_R,j,
               and W_UV applied after the read, o_h = W_UV,h Σ_j p_j c_KV,j (§2.1.2): decode steps
               with latent.absorb (the default), never expanding the cache
Padding is masked as in mixers/attention.py: padded tokens stay in the cache flagged invalid, positions count
real tokens only.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from . import norm
from .attention import ATTENTION_FORMS, token_positions, valid_flags
from .boundary import check_mixer_input


class LatentState(NamedTuple):
    """Cache of one latent-attention layer: latent c_KV [B, N, d_c], rope_keys k_R [B, N, d_R] (rotated),
    valid [B, N] bool (False = padding), pos [B] long (real tokens consumed)."""

    latent: torch.Tensor
    rope_keys: torch.Tensor
    valid: torch.Tensor
    pos: torch.Tensor


class LatentAttention(nn.Module):
    """Multi-head latent attention with its compressed cache (a ``MixerModule``, mixers/layer.py)."""

    masks_padding = True

    def __init__(self, d_model: int, *, num_heads: int, head_dim: int, value_dim: int, kv_rank: int,
                 rope_dim: int, q_rank: int | None = None, rope_theta: float = 10000.0, scale: float | None = None,
                 norm_eps: float = 1e-6, form: str = "sdpa", absorb: bool = True, rope_interleave: bool = False,
                 layer_idx: int | None = None):
        super().__init__()
        if form not in ATTENTION_FORMS:
            raise ValueError(f"attention form {form!r} is not available; choose one of {sorted(ATTENTION_FORMS)}")
        if rope_dim % 2:
            raise ValueError(f"latent attention's rope_dim must be even (RoPE rotates pairs), got {rope_dim}")
        self.H, self.K, self.V, self.R, self.C = num_heads, head_dim, value_dim, rope_dim, kv_rank
        self.rope_theta, self.form, self.absorb, self.layer_idx = rope_theta, form, absorb, layer_idx
        self.rope_interleave = rope_interleave
        self.scale = (head_dim + rope_dim) ** -0.5 if scale is None else scale
        q_width = num_heads * (head_dim + rope_dim)
        if q_rank is None:
            self.q_proj = nn.Linear(d_model, q_width, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, q_rank, bias=False)
            self.q_a_layernorm = norm.RMSNorm(q_rank, eps=norm_eps)
            self.q_b_proj = nn.Linear(q_rank, q_width, bias=False)
        self.q_rank = q_rank
        self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_rank + rope_dim, bias=False)
        self.kv_a_layernorm = norm.RMSNorm(kv_rank, eps=norm_eps)
        self.kv_b_proj = nn.Linear(kv_rank, num_heads * (head_dim + value_dim), bias=False)
        self.o_proj = nn.Linear(num_heads * value_dim, d_model, bias=False)

    def state_size(self, seq_len: int = 1) -> int:
        """Floats held per sequence after ``seq_len`` tokens: d_c + d_R per token."""
        return seq_len * (self.C + self.R)

    def forward(self, x: torch.Tensor, *, state: LatentState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True):
        """x [B, T, d_model]; mask [B, T] bool (True = real token) or None -> (y [B, T, d_model], LatentState or None)."""
        check_mixer_input("LatentAttention", x, self.kv_a_proj_with_mqa.in_features, mask)
        if state is not None and not isinstance(state, LatentState):
            raise TypeError(f"state must be a LatentState from this layer, got {type(state).__name__}")
        B, T, _ = x.shape
        pos, next_pos = token_positions(B, T, mask, None if state is None else state.pos, x.device)
        cos, sin = norm.rope_angles(pos, self.R, self.rope_theta, x.dtype)
        q_c, q_r = self.queries(x)
        latent, k_r = self.kv_a_proj_with_mqa(x).split([self.C, self.R], -1)
        latent = self.kv_a_layernorm(latent)
        if self.rope_interleave:  # pairs (2i, 2i + 1) -> (i, i + d_R/2)
            q_r, k_r = (torch.cat([t[..., 0::2], t[..., 1::2]], -1) for t in (q_r, k_r))
        q_r = norm.apply_rope(q_r, cos, sin)
        k_r = norm.apply_rope(k_r[:, :, None], cos, sin)[:, :, 0]
        valid = valid_flags(B, T, mask, None if state is None else state.valid, x.device)
        key_mask = None if valid is None or bool(valid.all()) else valid
        if state is not None and T == 1 and self.absorb:
            o = self.absorbed(q_c, q_r, torch.cat([state.latent, latent], 1), torch.cat([state.rope_keys, k_r], 1),
                              key_mask)
        else:
            o = self.expanded(q_c, q_r, latent, k_r, state, key_mask)
        y = self.o_proj(o.reshape(B, T, self.H * self.V))
        if not return_state:
            return y, None
        if state is not None:
            latent, k_r = torch.cat([state.latent, latent], 1), torch.cat([state.rope_keys, k_r], 1)
        valid = torch.ones(B, latent.shape[1], dtype=torch.bool, device=x.device) if valid is None else valid
        return y, LatentState(latent, k_r, valid, next_pos)

    def queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q_C [B, T, H, d_h] and the rotary part q_R [B, T, H, d_R] before RoPE (eqs. 12–14)."""
        B, T, _ = x.shape
        q = self.q_proj(x) if self.q_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return q.view(B, T, self.H, self.K + self.R).split([self.K, self.R], -1)

    def up_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK [H, d_h, d_c] and W_UV [H, d_v, d_c], the rows of kv_b_proj."""
        w = self.kv_b_proj.weight.view(self.H, self.K + self.V, self.C)
        return w[:, :self.K], w[:, self.K:]

    def expanded(self, q_c, q_r, latent, k_r, state: LatentState | None, key_mask) -> torch.Tensor:
        """o [B, T, H, d_v]: the cache's latents expanded to k = [k_C; k_R], v_C for every head and read by the
        spec's attention op."""
        q = torch.cat([q_c, q_r], -1)
        k, v = self._keys_values(latent, k_r)
        prefix = None
        if state is not None:
            keys, values = self._keys_values(state.latent, state.rope_keys)
            prefix = (keys.transpose(1, 2), values.transpose(1, 2))  # [B, H, N, ·]
        o, _ = ATTENTION_FORMS[self.form](q, k, v, scale=self.scale, window=None, initial_state=prefix,
                                          output_final_state=False, key_mask=key_mask)
        return o

    def _keys_values(self, latent: torch.Tensor, k_r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k [B, N, H, d_h + d_R] and v [B, N, H, d_v] of latents [B, N, d_c] and rotary keys [B, N, d_R]."""
        B, N, _ = latent.shape
        k_c, v = self.kv_b_proj(latent).view(B, N, self.H, self.K + self.V).split([self.K, self.V], -1)
        return torch.cat([k_c, k_r[:, :, None].expand(B, N, self.H, self.R)], -1), v

    def absorbed(self, q_c, q_r, latent, k_r, key_mask) -> torch.Tensor:
        """o [B, T, H, d_v] read from the latents [B, N + T, d_c] and rotary keys [B, N + T, d_R] with W_UK
        folded into the query and W_UV applied after the read (the last T keys are the queries' own)."""
        w_uk, w_uv = self.up_projections()
        T, M = q_c.shape[1], latent.shape[1]
        q_latent = torch.einsum("bthd,hdc->bthc", q_c, w_uk)
        scores = (torch.einsum("bthc,bnc->bhtn", q_latent, latent)
                  + torch.einsum("bthr,bnr->bhtn", q_r, k_r)) * self.scale
        query_at = torch.arange(M - T, M, device=latent.device)[:, None]
        keep = torch.arange(M, device=latent.device)[None] <= query_at  # [T, M] causal
        if key_mask is not None:  # a query always sees its own pair (as mixers/ops/attention.py)
            keep = keep[None] & (key_mask[:, None] | (torch.arange(M, device=latent.device)[None] == query_at)[None])
            keep = keep[:, None]
        p = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
        read = torch.einsum("bhtn,bnc->bthc", p, latent)  # Σ_j p_j c_KV,j
        return torch.einsum("bthc,hvc->bthv", read, w_uv)
