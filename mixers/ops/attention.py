"""Softmax attention as a nonparametric associative memory (Nadaraya–Watson).

The memory is the KV cache {(k_i, v_i)}; the read-out is the closed-form
minimiser of the Nadaraya–Watson objective (thesis §2.4, softmax as kernel
regression):

    o_t = argmin_o Σ_{i ≤ t} e^{s·q_tᵀk_i} ‖o − v_i‖²  =  Σ_i softmax_i(s·q_tᵀk_i) v_i      (1)

With a window w the memory keeps only the last w pairs, so query t reads the
keys t−w+1 … t (itself included).

Layout (project op contract):
    q: [B, T, H, K]      k: [B, T, Hkv, K]      v: [B, T, Hkv, V]      o: [B, T, H, V]
    state = (keys [B, Hkv, N, K], values [B, Hkv, N, V]): the cache of the N pairs seen before.
GQA: query head h reads kv head h // (H // Hkv).

``key_mask`` [B, N + T] (bool, True = a real token) removes padded pairs from
the memory. A query always sees its own pair, so a padded query reads a finite
value (which callers ignore) instead of NaN.

Dtypes (contract.py): q, k, v and the cache may differ in float dtype; both forms compute in their
promotion (``compute_dtype(..., accumulate=False)``: no state is summed, SDPA accumulates in float32
itself, so all-bf16 input stays bf16), each input cast once at the entry. ``o`` is returned in v's
dtype; the returned cache holds keys and values in the compute dtype.

Two forms with the same signature:
    recurrent_softmax_attention  the recurrence, one token at a time (reference)
    sdpa_softmax_attention       one masked call of F.scaled_dot_product_attention

Returned caches are views of buffers with spare slots (``append_pairs``), so a
decode step appends its pair in amortised O(1) instead of copying the cache.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .contract import check_float, compute_dtype
from .isolation import first_non_finite, keep_finite_prefix, spread_possible

State = tuple[torch.Tensor, torch.Tensor]

__all__ = ["recurrent_softmax_attention", "sdpa_softmax_attention", "attention_mask"]


def _check(q, k, v, window, initial_state, key_mask) -> int:
    """Validate types and shapes; return N, the number of cached pairs."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x, "[B, T, H, D]")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, T, H, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, T, H, K = q.shape
    if k.shape[:2] != (B, T) or k.shape[3] != K or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k must be [B, T, Hkv, K] and v [B, T, Hkv, V] matching q {tuple(q.shape)}; "
                         f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if H % k.shape[2]:
        raise ValueError(f"q [B, T, H, K] must have a multiple of the kv heads of k [B, T, Hkv, K] (GQA); "
                         f"got H = {H} for Hkv = {k.shape[2]}: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if window is not None and window < 1:
        raise ValueError(f"window must be a positive int or None, got {window}")
    N = 0
    if initial_state is not None:
        keys, values = initial_state
        check_float("initial_state[0] (keys)", keys, "[B, Hkv, N, K]")
        check_float("initial_state[1] (values)", values, "[B, Hkv, N, V]")
        if keys.shape[:2] != (B, k.shape[2]) or keys.shape[3] != K or values.shape[:3] != keys.shape[:3]:
            raise ValueError(f"initial_state must be (keys [B, Hkv, N, K], values [B, Hkv, N, V]) for "
                             f"B={B}, Hkv={k.shape[2]}, K={K}; got {tuple(keys.shape)}, {tuple(values.shape)}")
        N = keys.shape[2]
    if key_mask is not None and tuple(key_mask.shape) != (B, N + T):
        raise ValueError(f"key_mask must be [B, N + T] = [{B}, {N + T}], got {tuple(key_mask.shape)}")
    return N


def _in_compute_dtype(q, k, v, initial_state):
    """q, k, v and the cache cast to their compute dtype (contract.py; no raise of half types)."""
    cd = compute_dtype(q, k, v, initial_state, accumulate=False)
    cache = None if initial_state is None else tuple(t.to(cd) for t in initial_state)
    return q.to(cd), k.to(cd), v.to(cd), cache


HEADROOM = 256  # minimum number of spare slots allocated when a cache buffer grows


def _concat(k, v, initial_state) -> State:
    """All pairs as [B, Hkv, N + T, D]: the cache followed by the new ones."""
    keys, values = k.transpose(1, 2), v.transpose(1, 2)  # [B, Hkv, T, D]
    if initial_state is None:
        return keys, values
    return append_pairs(initial_state[0], keys), append_pairs(initial_state[1], values)


def append_pairs(prefix: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """prefix [B, H, N, D] followed by new [B, H, T, D] along the slot axis, amortised O(T).

    Results are views of buffers allocated here with spare slots; each view
    carries its buffer (attribute ``_kv_buffer``) and the buffer records the end
    of its newest view (``_kv_end``). When ``prefix`` is the newest view of its
    buffer and the buffer has room, the new rows are written into the spare
    slots after it; otherwise (a foreign tensor, an older view, a full buffer) a
    buffer with max(HEADROOM, N/2) spare slots is allocated and the prefix copied
    once. Decoding T tokens one by one thus copies O(N + T) rows in total rather
    than O(N·T), and no tensor handed out earlier ever changes. Under autograd it
    is a plain ``torch.cat``.
    """
    B, H, N, D = prefix.shape
    T = new.shape[2]
    if torch.is_grad_enabled() and (prefix.requires_grad or new.requires_grad):
        return torch.cat([prefix, new], dim=2)
    buf = getattr(prefix, "_kv_buffer", None)
    if buf is not None and prefix.dtype == new.dtype and _end(prefix, buf) == buf._kv_end \
            and buf._kv_end + T <= buf.shape[2]:
        out = prefix.as_strided((B, H, N + T, D), prefix.stride(), prefix.storage_offset())
        out[:, :, N:] = new
        buf._kv_end += T
    else:
        buf = prefix.new_empty(B, H, N + T + max(HEADROOM, N // 2), D)
        buf[:, :, :N] = prefix
        buf[:, :, N:N + T] = new
        out = buf[:, :, :N + T]
        buf._kv_end = N + T
    out._kv_buffer = buf
    return out


def _end(t: torch.Tensor, buf: torch.Tensor) -> int:
    """Slot index just after the last slot of view t [B, H, n, D] of buf [B, H, S, D] (-1 if not a view of it)."""
    if t.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr() or t.stride() != buf.stride():
        return -1
    return (t.storage_offset() - buf.storage_offset()) // t.shape[3] + t.shape[2]


def _last(t: torch.Tensor, window: int) -> torch.Tensor:
    """The last `window` slots of t: a view that keeps t's buffer, or a copy of a foreign tensor."""
    buf = getattr(t, "_kv_buffer", None)
    if buf is None:
        return t[:, :, -window:].clone()
    out = t[:, :, -window:]
    out._kv_buffer = buf
    return out


def _final(keys, values, window, output_final_state):
    if not output_final_state:
        return None
    if window is not None:  # keep the last `window` pairs
        keys, values = _last(keys, window), _last(values, window)
    return keys, values


def attention_mask(T: int, N: int, *, window=None, key_mask=None, device=None) -> torch.Tensor:
    """Boolean mask [B or 1, 1, T, N + T]: query i (absolute slot N + i) may read key j.

    causal: j ≤ N + i; window: j > N + i − window; key_mask: key j is real (or j is the query itself).
    """
    qpos = torch.arange(T, device=device)[:, None] + N  # [T, 1]
    kpos = torch.arange(N + T, device=device)[None, :]  # [1, N + T]
    allowed = kpos <= qpos
    if window is not None:
        allowed = allowed & (kpos > qpos - window)
    allowed = allowed[None, None]  # [1, 1, T, N + T]
    if key_mask is not None:
        allowed = allowed & (key_mask[:, None, None, :].bool() | (kpos == qpos)[None, None])
    return allowed


def recurrent_softmax_attention(q, k, v, *, scale=None, window=None, initial_state=None,
                                output_final_state=False, key_mask=None):
    """Eq. (1) token by token: write (k_t, v_t), evict beyond the window, read with q_t.

    Returns (o [B, T, H, V], state or None).
    """
    N = _check(q, k, v, window, initial_state, key_mask)
    out_dtype = v.dtype
    q, k, v, initial_state = _in_compute_dtype(q, k, v, initial_state)
    B, T, H, K = q.shape
    rep = H // k.shape[2]
    scale = K ** -0.5 if scale is None else scale
    keys, values = _concat(k, v, initial_state)  # [B, Hkv, N + T, D]
    valid = torch.ones(B, N + T, dtype=torch.bool, device=q.device) if key_mask is None else key_mask.bool()
    outs = []
    for t in range(T):
        end = N + t + 1                                   # 1. the memory holds pairs [0, end)
        start = 0 if window is None else max(0, end - window)  # 2. keep the last `window` pairs
        kt = keys[:, :, start:end].repeat_interleave(rep, dim=1)    # [B, H, n, K]
        vt = values[:, :, start:end].repeat_interleave(rep, dim=1)  # [B, H, n, V]
        mask = valid[:, start:end].clone()
        mask[:, -1] = True                                # a query always sees itself
        s = scale * torch.einsum("bhk,bhnk->bhn", q[:, t], kt)      # 3. similarities s·qᵀk_i
        s = s.masked_fill(~mask[:, None, :], float("-inf"))
        p = torch.softmax(s, dim=-1)                      # 4. Nadaraya–Watson weights
        outs.append(torch.einsum("bhn,bhnv->bhv", p, vt))  # 5. weighted mean of the values
    o = torch.stack(outs, dim=1).to(out_dtype)  # [B, T, H, V]
    return o, _final(keys, values, window, output_final_state)


def sdpa_softmax_attention(q, k, v, *, scale=None, window=None, initial_state=None,
                           output_final_state=False, key_mask=None):
    """Eq. (1) for all T queries at once with ``F.scaled_dot_product_attention``.

    The cache (initial_state) is prepended to the new pairs; the mask is causal,
    optionally windowed and key-padded. A non-finite key or value at position p never reaches
    o_{<p} (``isolation.py``). Returns (o [B, T, H, V], state or None).
    """
    N = _check(q, k, v, window, initial_state, key_mask)
    out_dtype = v.dtype
    q, k, v, initial_state = _in_compute_dtype(q, k, v, initial_state)
    B, T, H, K = q.shape
    rep = H // k.shape[2]
    keys, values = _concat(k, v, initial_state)  # [B, Hkv, N + T, D]
    qh = q.transpose(1, 2)  # [B, H, T, K]
    gqa = rep > 1  # query head h reads kv head h // rep
    if window is None and key_mask is None and N == 0:
        o = F.scaled_dot_product_attention(qh, keys, values, is_causal=True, scale=scale, enable_gqa=gqa)
    elif window is None and key_mask is None and T == 1:  # one query reads the whole cache
        o = F.scaled_dot_product_attention(qh, keys, values, scale=scale, enable_gqa=gqa)
    else:
        mask = attention_mask(T, N, window=window, key_mask=key_mask, device=q.device)
        o = F.scaled_dot_product_attention(qh, keys, values, attn_mask=mask, scale=scale, enable_gqa=gqa)
    o = o.transpose(1, 2)  # [B, T, H, V]
    if spread_possible(k, v) and not spread_possible(*(initial_state or ())):  # isolation.py: 0 · NaN in P V
        p = first_non_finite(k, v)
        o = keep_finite_prefix(o, p, lambda p: sdpa_softmax_attention(
            q[:, :p], k[:, :p], v[:, :p], scale=scale, window=window, initial_state=initial_state,
            key_mask=None if key_mask is None else key_mask[:, :N + p])[0])
    return o.to(out_dtype), _final(keys, values, window, output_final_state)
