"""Softmax attention module: the NonParametric + NadarayaWatson mixer.

    q = rot(norm(x W_q + b_q)), k = rot(norm(x W_k + b_k)), v = x W_v + b_v      [B, T, H(kv), D]
    o = softmax-attention(q, k, v) over the KV cache                           (mixers/ops/attention.py)
    y = o W_o (+ b_o)

Short convolution (``layer.attention.short_conv``, off by default): the three projections go
through the recurrent mixers' causal depthwise conv + SiLU (mixers/conv.py, width
``layer.conv_size``) before QK-norm and the rotary map, so every q, k, v sees the last few
tokens, the "shift" the recurrent mixers get for free and plain attention has to learn as a
previous-token head (the MQAR control of docs/experiments/mqar-target.md). Padded tokens enter the conv as
zeros, which equals its own left padding: with the conv, a padding mask must be left padding
(each row's padding before its real tokens) and may not pad after a cache.

Biases: none (Llama's default), q/k/v only (Qwen2), or all four (``attention_bias=True``
in Llama and Qwen3); ``layer.attention.bias``.

The rotary map rot is RoPE (Su et al. 2021, mixers/norm.py: pairs (i, i + K/2) of a head
rotated by pos · θ^(−2i/K)) or none. QK-norm is a per-head RMSNorm on q and k before the
rotation; GQA shares each kv head between H / Hkv query heads. The module masks padded keys
itself (``masks_padding``): a padded batch needs no regrouping by models/blocks.py.

The steps are methods a subclass can build on (Wiola's attention, mixers/wiola/attention.py):
``heads`` (projections, conv, QK-norm, rotary map via ``angles``), ``attend`` (the op over the
cache, and the new state) and ``o_proj``.

Decode state (``AttentionState``): the rotated keys and the values of every
pair kept so far, which of them are real tokens (padding is masked out), the
next position of each sequence (positions count real tokens only, so a
left-padded row gets the same rotary angles as the unpadded sequence) and the conv buffer
(the last conv_size − 1 projections).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn as nn


from . import norm
from .boundary import check_mixer_input
from .conv import ShortConv
from .lower import FAMILIES

ATTENTION_FORMS = FAMILIES["softmax_attention"].ops  # form -> op, from the class table (lower.py)


def token_positions(B: int, T: int, mask: torch.Tensor | None, start: torch.Tensor | None,
                    device) -> tuple[torch.Tensor, torch.Tensor]:
    """Absolute positions [B, T] counting real tokens only (mask [B, T] or None), from ``start`` [B] (the
    cache's next position, or None for 0), and the next position [B]."""
    pos0 = torch.zeros(B, dtype=torch.long, device=device) if start is None else start
    if mask is None:
        return pos0[:, None] + torch.arange(T, device=device), pos0 + T
    steps = mask.long().cumsum(1)  # [B, T]
    return pos0[:, None] + (steps - 1).clamp(min=0), pos0 + steps[:, -1]


def valid_flags(B: int, T: int, mask: torch.Tensor | None, cached: torch.Tensor | None, device) -> torch.Tensor | None:
    """Real-token flags of cache (``cached`` [B, N] or None) + new pairs [B, N + T], or None when all are real
    and there is no cache."""
    new = torch.ones(B, T, dtype=torch.bool, device=device) if mask is None else mask.bool()
    if cached is None:
        return None if mask is None else new
    return torch.cat([cached, new], dim=1)


class AttentionState(NamedTuple):
    """KV cache of one attention layer.

    keys [B, Hkv, N, K] (after the rotary map), values [B, Hkv, N, V], valid [B, N] bool
    (False = padding), pos [B] long (number of real tokens consumed), conv: the short conv's
    buffer [B, conv_size − 1, H·K + Hkv·(K + V)] or None.
    """

    keys: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor
    pos: torch.Tensor
    conv: torch.Tensor | None = None


class Heads(NamedTuple):
    """q [B, T, H, K], k [B, T, Hkv, K] (both after the rotary map), v [B, T, Hkv, V] of one call,
    the next position of each row [B] and the short conv's new buffer (or None)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    next_pos: torch.Tensor
    conv: torch.Tensor | None


class Attention(nn.Module):
    """Multi-head causal softmax attention with RoPE, GQA, optional QK-norm, window and short
    convolution (a ``MixerModule``, mixers/layer.py)."""

    masks_padding = True  # forward takes mask [B, T] and masks padded keys itself

    def __init__(self, d_model: int, *, num_heads: int, head_dim: int, num_kv_heads: int | None = None,
                 value_dim: int | None = None, rope: bool = True, rope_theta: float = 10000.0,
                 qk_rmsnorm: bool = False, window: int | None = None, scale: float | None = None,
                 bias: str = "none", norm_eps: float = 1e-6, form: str = "sdpa", layer_idx: int | None = None,
                 short_conv: bool = False, conv_size: int = 4):
        super().__init__()
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % kv:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({kv})")
        if rope and head_dim % 2:
            raise ValueError(f"a rotary map needs an even head_dim, got {head_dim}")
        if form not in ATTENTION_FORMS:
            raise ValueError(f"attention form {form!r} is not available; choose one of {sorted(ATTENTION_FORMS)}")
        self.H, self.Hkv, self.K = num_heads, kv, head_dim
        self.V = head_dim if value_dim is None else value_dim
        self.rope, self.rope_theta, self.window, self.scale = rope, rope_theta, window, scale
        self.form, self.layer_idx = form, layer_idx
        if bias not in ("none", "qkv", "all"):
            raise ValueError(f"attention bias must be 'none', 'qkv' or 'all', got {bias!r}")
        qkv_bias = bias != "none"
        self.q_proj = nn.Linear(d_model, self.H * self.K, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, self.Hkv * self.K, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, self.Hkv * self.V, bias=qkv_bias)
        self.o_proj = nn.Linear(self.H * self.V, d_model, bias=bias == "all")
        self.q_norm = norm.RMSNorm(self.K, eps=norm_eps) if qk_rmsnorm else None
        self.k_norm = norm.RMSNorm(self.K, eps=norm_eps) if qk_rmsnorm else None
        width = self.H * self.K + self.Hkv * (self.K + self.V)
        self.conv = ShortConv(width, conv_size) if short_conv else None

    def state_size(self, seq_len: int = 1) -> int:
        """Floats held per sequence after ``seq_len`` tokens (the cache grows with T; the short conv
        adds its buffer)."""
        n = seq_len if self.window is None else min(seq_len, self.window)
        conv = 0 if self.conv is None else (self.conv.size - 1) * self.conv.channels
        return n * self.Hkv * (self.K + self.V) + conv

    def angles(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of the rotary map at positions pos [B, T]: RoPE's."""
        return norm.rope_angles(pos, self.K, self.rope_theta, dtype)

    def forward(self, x: torch.Tensor, *, state: AttentionState | None = None, mask: torch.Tensor | None = None,
                return_state: bool = True):
        """x [B, T, d_model]; mask [B, T] bool (True = real token) or None.

        Returns (y [B, T, d_model], AttentionState or None).
        """
        check_mixer_input("Attention", x, self.q_proj.in_features, mask)
        B, T, _ = x.shape
        heads = self.heads(x, mask, state)
        o, new_state = self.attend(heads, mask, state, return_state)
        return self.o_proj(o.reshape(B, T, self.H * self.V)), new_state

    def heads(self, x: torch.Tensor, mask: torch.Tensor | None, state: AttentionState | None) -> Heads:
        """The projections of x [B, T, d_model] (through the short conv if on), QK-norm and the rotary
        map at the positions of the real tokens of ``mask``, continued from ``state``."""
        B, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        conv_buf = None
        if self.conv is not None:
            q, k, v, conv_buf = self._convolve(q, k, v, mask, state)
        q, k = q.reshape(B, T, self.H, self.K), k.reshape(B, T, self.Hkv, self.K)
        v = v.reshape(B, T, self.Hkv, self.V)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        pos, next_pos = token_positions(B, T, mask, None if state is None else state.pos, x.device)
        if self.rope:
            cos, sin = self.angles(pos, q.dtype)
            q, k = norm.apply_rope(q, cos, sin), norm.apply_rope(k, cos, sin)
        return Heads(q, k, v, next_pos, conv_buf)

    def attend(self, heads: Heads, mask: torch.Tensor | None, state: AttentionState | None, return_state: bool,
               op: Callable | None = None) -> tuple[torch.Tensor, AttentionState | None]:
        """o [B, T, H, V] of softmax attention over the cache of ``state`` and these heads, and the new
        state (None unless ``return_state``). ``op(q, k, v, scale=, key_mask=)`` replaces the form's op
        for this call (it keeps no cache: the state is assembled from the keys and values)."""
        q, k, v = heads.q, heads.k, heads.v
        B, T = q.shape[:2]
        prefix = None if state is None else (state.keys, state.values)
        valid = valid_flags(B, T, mask, None if state is None else state.valid, q.device)
        key_mask = None if valid is None or bool(valid.all()) else valid
        if op is not None:
            o, kv = op(q, k, v, scale=self.scale, key_mask=key_mask), None
        else:
            o, kv = ATTENTION_FORMS[self.form](q, k, v, scale=self.scale, window=self.window, initial_state=prefix,
                                               output_final_state=return_state and mask is None,
                                               key_mask=key_mask)
        if not return_state:
            return o, None
        if kv is not None:  # no new padding: the op's cache (already cut to the window) is the state
            n = kv[0].shape[2]
            valid = torch.ones(B, n, dtype=torch.bool, device=q.device) if valid is None else valid[:, -n:]
            return o, AttentionState(kv[0], kv[1], valid, heads.next_pos, heads.conv)
        if valid is None:
            valid = torch.ones(B, T, dtype=torch.bool, device=q.device)
        return o, self._packed_state(k, v, prefix, valid, heads.next_pos)._replace(conv=heads.conv)

    def _convolve(self, q, k, v, mask, state):
        """The short conv on the flat projections [B, T, ·]: padded tokens enter as zeros (left padding
        only, see the module docstring); returns q, k, v and the new conv buffer."""
        if mask is not None and not bool(mask.all()):
            m = mask.bool()
            if state is not None or bool((m[:, :-1] & ~m[:, 1:]).any()):
                raise ValueError("attention with short_conv takes left padding only (each row's padding before its "
                                 "real tokens, and none after a cache): a padded token inside a row would enter the "
                                 "convolution of the tokens after it")
            q, k, v = (t * m[..., None].to(t.dtype) for t in (q, k, v))
        z, buf = self.conv(torch.cat([q, k, v], -1), None if state is None else state.conv)
        q, k, v = z.split([self.H * self.K, self.Hkv * self.K, self.Hkv * self.V], -1)
        return q, k, v, buf

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
