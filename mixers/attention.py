"""Softmax attention module: the NonParametric + NadarayaWatson mixer.

    q = RoPE(norm(x W_q)), k = RoPE(norm(x W_k)), v = x W_v      [B, T, H(kv), D]
    o = softmax-attention(q, k, v) over the KV cache               (mixers/ops/attention.py)
    y = o W_o

RoPE (Su et al. 2021, mixers/norm.py) rotates pairs (i, i + K/2) of each head by
angle pos · θ^(−2i/K); QK-norm is a per-head RMSNorm on q and k before RoPE; GQA
shares each kv head between H / Hkv query heads. The module masks padded keys
itself (``masks_padding``): a padded batch needs no regrouping by models/blocks.py.

Decode state (``AttentionState``): the rotated keys and the values of every
pair kept so far, which of them are real tokens (padding is masked out), and
the next position of each sequence (positions count real tokens only, so a
left-padded row gets the same RoPE angles as the unpadded sequence).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from assocmem.memories.deprecation import moved, names_in

from . import norm
from .lower import FAMILIES

ATTENTION_FORMS = FAMILIES["softmax_attention"].ops  # form -> op, from the class table (lower.py)


class AttentionState(NamedTuple):
    """KV cache of one attention layer.

    keys [B, Hkv, N, K] (after RoPE), values [B, Hkv, N, V], valid [B, N] bool
    (False = padding), pos [B] long (number of real tokens consumed).
    """

    keys: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor
    pos: torch.Tensor


class Attention(nn.Module):
    """Multi-head causal softmax attention with RoPE, GQA, optional QK-norm and window
    (a ``MixerModule``, mixers/layer.py)."""

    masks_padding = True  # forward takes mask [B, T] and masks padded keys itself

    def __init__(self, d_model: int, *, num_heads: int, head_dim: int, num_kv_heads: int | None = None,
                 value_dim: int | None = None, rope: bool = True, rope_theta: float = 10000.0,
                 qk_rmsnorm: bool = False, window: int | None = None, scale: float | None = None,
                 form: str = "sdpa", layer_idx: int | None = None):
        super().__init__()
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % kv:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({kv})")
        if rope and head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
        if form not in ATTENTION_FORMS:
            raise ValueError(f"attention form {form!r} is not available; choose one of {sorted(ATTENTION_FORMS)}")
        self.H, self.Hkv, self.K = num_heads, kv, head_dim
        self.V = head_dim if value_dim is None else value_dim
        self.rope, self.rope_theta, self.window, self.scale = rope, rope_theta, window, scale
        self.form, self.layer_idx = form, layer_idx
        self.q_proj = nn.Linear(d_model, self.H * self.K, bias=False)
        self.k_proj = nn.Linear(d_model, self.Hkv * self.K, bias=False)
        self.v_proj = nn.Linear(d_model, self.Hkv * self.V, bias=False)
        self.o_proj = nn.Linear(self.H * self.V, d_model, bias=False)
        self.q_norm = norm.RMSNorm(self.K) if qk_rmsnorm else None
        self.k_norm = norm.RMSNorm(self.K) if qk_rmsnorm else None

    def state_size(self, seq_len: int = 1) -> int:
        """Floats held per sequence after ``seq_len`` tokens (the cache grows with T)."""
        n = seq_len if self.window is None else min(seq_len, self.window)
        return n * self.Hkv * (self.K + self.V)

    def _positions(self, B, T, mask, state, device):
        """Absolute positions [B, T] counting real tokens only, and the next position [B]."""
        pos0 = torch.zeros(B, dtype=torch.long, device=device) if state is None else state.pos
        if mask is None:
            return pos0[:, None] + torch.arange(T, device=device), pos0 + T
        steps = mask.long().cumsum(1)  # [B, T]
        return pos0[:, None] + (steps - 1).clamp(min=0), pos0 + steps[:, -1]

    def forward(self, x: torch.Tensor, *, state: AttentionState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True):
        """x [B, T, d_model]; mask [B, T] bool (True = real token) or None.

        Returns (y [B, T, d_model], AttentionState or None).
        """
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.K)
        k = self.k_proj(x).view(B, T, self.Hkv, self.K)
        v = self.v_proj(x).view(B, T, self.Hkv, self.V)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        pos, next_pos = self._positions(B, T, mask, state, x.device)
        if self.rope:
            cos, sin = norm.rope_angles(pos, self.K, self.rope_theta, q.dtype)
            q, k = norm.apply_rope(q, cos, sin), norm.apply_rope(k, cos, sin)
        prefix = None if state is None else (state.keys, state.values)
        valid = self._valid(B, T, mask, state, x.device)
        key_mask = None if valid is None or bool(valid.all()) else valid
        o, kv = ATTENTION_FORMS[self.form](q, k, v, scale=self.scale, window=self.window, initial_state=prefix,
                                           output_final_state=return_state and mask is None, key_mask=key_mask)
        y = self.o_proj(o.reshape(B, T, self.H * self.V))
        if not return_state:
            return y, None
        if mask is None:  # no new padding: the op's cache (already cut to the window) is the state
            n = kv[0].shape[2]
            valid = torch.ones(B, n, dtype=torch.bool, device=x.device) if valid is None else valid[:, -n:]
            return y, AttentionState(kv[0], kv[1], valid, next_pos)
        return y, self._packed_state(k, v, prefix, valid, next_pos)

    def _packed_state(self, k, v, prefix, valid, next_pos) -> AttentionState:
        """Cache after a padded call: real pairs moved to the end of each row (order kept), so that
        the last w slots hold the last w real tokens; slots that are padding in every row are dropped."""
        keys, values = k.transpose(1, 2), v.transpose(1, 2)  # [B, Hkv, T, D]
        if prefix is not None:
            keys, values = torch.cat([prefix[0], keys], 2), torch.cat([prefix[1], values], 2)
        order = torch.argsort(valid.int(), dim=1, stable=True)  # [B, N]: padding first
        keys = keys.gather(2, order[:, None, :, None].expand_as(keys))
        values = values.gather(2, order[:, None, :, None].expand_as(values))
        valid = valid.gather(1, order)
        drop = int((~valid).sum(1).min())
        if self.window is not None:
            drop = max(drop, valid.shape[1] - self.window)
        return AttentionState(keys[:, :, drop:].contiguous(), values[:, :, drop:].contiguous(), valid[:, drop:],
                              next_pos)

    @staticmethod
    def _valid(B, T, mask, state, device):
        """Real-token flags of cache + new pairs [B, N + T], or None when all are real and no cache."""
        new = torch.ones(B, T, dtype=torch.bool, device=device) if mask is None else mask.bool()
        if state is None:
            return None if mask is None else new
        return torch.cat([state.valid, new], dim=1)


# ------------------------------------------------------------------ old paths (removed in 0.2.0)
__getattr__ = moved(__name__, names_in("assocmem.mixers.norm", "RMSNorm", "rope_angles", "apply_rope"))
