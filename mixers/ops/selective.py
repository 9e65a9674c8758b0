"""Selective SSM (Mamba, Gu & Dao 2023): a matrix memory with one decay per entry.

Per head, S ∈ R^{K×V} (S = hᵀ of Mamba's state h ∈ R^{D×N}: key n = state index, value d = channel):

    S_t = exp(log α_t) ⊙ S_{t−1} + β_t k_t v_tᵀ,      o_t = scale · S_tᵀ q_t
    log_alpha [B, T, H, K, V]   (Mamba: Δ_{t,d} A_{d,n}; one decay per entry of S)

The decay depends on the key n and the value channel d at once, so the product of decays from s to
t is a [K, V] tensor per pair (s, t): the intra-chunk term of a chunkwise form would be one C×C
matrix per value channel (K·V·C² work per chunk against K·V·C for the scan), which is why the class
has no chunk form (mixers/lower.py). Both forms here are exact:

    recurrent_selective   the published recurrence token by token (transformers' MambaMixer loop)
    scan_selective        the same scan over blocks of ``block`` tokens: the discretisation (exp of the
                          decays, the writes k ⊗ βv) is computed for a whole block at once, the block's
                          steps are one function (``_block``), which ``compile=True`` fuses with
                          torch.compile (one graph per shape: the tail is padded with log α = 0 and zero
                          writes, which keep the state); the read-out is one contraction per block

Op contract (mixers/ops/contract.py; the dtype rule there): o [B, T, H, V] in v's dtype, the final
state [B, H, K, V] in the compute dtype.
"""
from __future__ import annotations

import numbers

import torch

from .compiled import compiled
from .contract import check_float, compute_dtype

__all__ = ["recurrent_selective", "scan_selective", "DEFAULT_BLOCK"]

DEFAULT_BLOCK = 16  # tokens per block of the scan form


def _check(fn: str, q, k, v, log_alpha, beta, scale, initial_state) -> torch.dtype:
    """The op contract with a per-entry decay; errors name the argument and the expected layout."""
    layouts = {"q": "[B, T, H, K]", "k": "[B, T, H, K]", "v": "[B, T, H, V]"}
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x, layouts[name], fn=fn)
        if x.dim() != 4:
            raise ValueError(f"{fn}: {name} must be {layouts[name]}, got shape {tuple(x.shape)}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"{fn}: k must be [B, T, H, K] = {tuple(q.shape)} and v [B, T, H, V] with B, T, H of q; "
                         f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if T == 0:
        raise ValueError(f"{fn}: q, k, v have T = 0 tokens; at least one is required")
    check_float("log_alpha", log_alpha, "[B, T, H, K, V]", fn=fn)
    if tuple(log_alpha.shape) != (B, T, H, K, V):
        raise ValueError(f"{fn}: log_alpha must be [B, T, H, K, V] = {(B, T, H, K, V)} (one decay per entry of S), "
                         f"got {tuple(log_alpha.shape)}")
    if beta is not None and tuple(beta.shape) != (B, T, H):
        raise ValueError(f"{fn}: beta must be None or [B, T, H] = {(B, T, H)}, got {tuple(beta.shape)}")
    if initial_state is not None and tuple(initial_state.shape) != (B, H, K, V):
        raise ValueError(f"{fn}: initial_state must be [B, H, K, V] = {(B, H, K, V)}, got {tuple(initial_state.shape)}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"{fn}: scale must be a number or None, got {type(scale).__name__}")
    return compute_dtype(q, k, v, log_alpha, beta, initial_state)


def _prepared(fn, q, k, v, log_alpha, beta, scale, initial_state):
    """Inputs cast to the compute dtype, the write strength folded into v, the scale and S_0."""
    cd = _check(fn, q, k, v, log_alpha, beta, scale, initial_state)
    q, k, v, log_alpha = (x.to(cd) for x in (q, k, v, log_alpha))
    if beta is not None:
        v = v * beta.to(cd)[..., None]  # β k vᵀ = k (β v)ᵀ
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.to(cd)
    return q, k, v, log_alpha, (K ** -0.5 if scale is None else scale), S


def recurrent_selective(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False):
    """The hand-written recurrence, one token at a time (module docstring)."""
    o_dtype = v.dtype
    q, k, v, log_alpha, scale, S = _prepared("recurrent_selective", q, k, v, log_alpha, beta, scale, initial_state)
    outs = []
    for t in range(q.shape[1]):
        S = torch.exp(log_alpha[:, t]) * S + k[:, t, :, :, None] * v[:, t, :, None, :]  # [B, H, K, V]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(outs, dim=1).to(o_dtype), (S if output_final_state else None)


def _block(S: torch.Tensor, log_alpha: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q: torch.Tensor):
    """One block of C tokens from S [B, H, K, V]: log_alpha [B, C, H, K, V], k, q [B, C, H, K], v [B, C, H, V]
    -> (o [B, C, H, V] unscaled, S after the block)."""
    decay = torch.exp(log_alpha)
    write = k[..., :, None] * v[..., None, :]  # [B, C, H, K, V]
    states = []
    for t in range(log_alpha.shape[1]):
        S = decay[:, t] * S + write[:, t]
        states.append(S)
    return torch.einsum("bchk,bchkv->bchv", q, torch.stack(states, dim=1)), S


def scan_selective(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False,
                   block: int = DEFAULT_BLOCK, compile: bool = False):
    """The scan over blocks of ``block`` tokens, eager or fused by torch.compile (module docstring)."""
    o_dtype, T = v.dtype, q.shape[1]
    q, k, v, log_alpha, scale, S = _prepared("scan_selective", q, k, v, log_alpha, beta, scale, initial_state)
    step = _block
    if compile:
        step = compiled(_block)
        pad = -T % block  # one graph per shape: log α = 0 and zero writes keep the state
        if pad:
            tail = lambda x: torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, pad))  # noqa: E731
            q, k, v, log_alpha = tail(q), tail(k), tail(v), tail(log_alpha)
    outs = []
    for start in range(0, q.shape[1], block):
        end = start + block
        o, S = step(S, log_alpha[:, start:end], k[:, start:end], v[:, start:end], q[:, start:end])
        outs.append(o)
    o = scale * torch.cat(outs, dim=1)[:, :T]
    return o.to(o_dtype), (S if output_final_state else None)
