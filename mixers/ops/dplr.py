"""Diagonal plus low rank (RWKV-7): a per-key in-context rate and a separate removal key.

Per head, S ∈ R^{K×V} (the thesis's M = Sᵀ), read after the write o_t = S_tᵀ (scale · q_t):

    S_t = (diag(α_t) − (β_t ⊙ κ_t) κ_tᵀ) S_{t−1} + (β_t ⊙ k_t) v_tᵀ

    α_t = exp(log_alpha) ∈ (0, 1]^K   the per-key decay (RWKV-7's w_t)
    β_t ∈ R^K (or one per head)        the in-context learning rate (RWKV-7's a_t)
    κ_t                                the removal key (RWKV-7's κ̂_t; None: κ_t = k_t)
    k_t                                the replacement key (RWKV-7's k̃_t = a_t ⊙ k_t, i.e. k_a = 1)

It is ONE gradient step, with step size diag(β_t) and the decay taken jointly, on the
remove_replace bias ℓ = ½‖Sᵀκ‖² − ⟨Sᵀk, v⟩ (memories/bias.py). With κ = k and a scalar β it
is Table 2.1's RWKV-7, (diag(α_t) − β_t k_t k_tᵀ) M + β_t v_t k_tᵀ, the joint delta rule of
``delta.py``. FLA writes the same transition as S_t = S diag(e^{w}) + S a bᵀ + v kᵀ in [V, K]
(``fla/ops/generalized_delta_rule/dplr/naive.py``): a = −κ, b = β ⊙ κ, its k = β ⊙ k.

    o, S = <form>(q, k, v, *, removal_key=None, log_alpha=None, beta=None, scale=None,
                  initial_state=None, output_final_state=False[, chunk_size=None])
    q, k, removal_key: [B, T, H, K]; v: [B, T, H, V]; log_alpha: None, [B, T, H] or [B, T, H, K];
    beta: None (= 1), [B, T, H] or [B, T, H, K]; initial_state: None or [B, H, K, V]

``recurrent_dplr`` loops over time; ``chunk_dplr`` is the chunkwise form
(``delta_chunk.chunk_low_rank``: the UT transform on the erase values, the carry on 2C writes).
Dtypes as every op (contract.py): inputs of different float dtypes compute in their promotion with
bf16/fp16 raised to float32; ``o`` comes back in v's dtype, the final state in the compute dtype.
"""
from __future__ import annotations

import torch

from .contract import FLOAT_DTYPES, check_chunk_size, check_matrix_inputs, compute_dtype
from .delta_chunk import chunk_low_rank, default_chunk_size
from .isolation import first_non_finite, keep_finite_prefix, spread_possible

__all__ = ["recurrent_dplr", "chunk_dplr"]


def _per_key(fn: str, name: str, x, B: int, T: int, H: int, K: int, scalar_ok: bool):
    if x is None:
        return None
    if not isinstance(x, torch.Tensor) or x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be None or a floating tensor (float16, bfloat16, float32 or float64), "
                        f"got {getattr(x, 'dtype', type(x).__name__)}")
    allowed = [(B, T, H, K)] + ([(B, T, H)] if scalar_ok else [])
    if tuple(x.shape) not in allowed:
        names = "[B, T, H, K]" + (" or [B, T, H]" if scalar_ok else "")
        raise ValueError(f"{fn}: {name} must be None or {names} = {' or '.join(map(str, allowed))}, "
                         f"got {tuple(x.shape)}")
    return x if x.dim() == 4 else x[..., None].expand(B, T, H, K)


def _prepare(fn: str, q, k, v, removal_key, log_alpha, beta, scale, initial_state):
    """Validate; return q, k, v, κ, log α, β [B, T, H, K] each (filled in, in the compute dtype), the state
    and the scale."""
    check_matrix_inputs(fn, q, k, v, log_alpha, None, scale, initial_state, per_key=True)
    B, T, H, K = q.shape
    beta = _per_key(fn, "beta", beta, B, T, H, K, scalar_ok=True)
    kappa = _per_key(fn, "removal_key", removal_key, B, T, H, K, scalar_ok=False)
    cd = compute_dtype(q, k, v, log_alpha, beta, kappa, initial_state)
    la = _per_key(fn, "log_alpha", log_alpha, B, T, H, K, scalar_ok=True)
    c = lambda x, fill: (q.new_full((B, T, H, K), fill, dtype=cd) if x is None else x.to(cd))  # noqa: E731
    state = q.new_zeros(B, H, K, v.shape[-1], dtype=cd) if initial_state is None else initial_state.to(cd)
    return (q.to(cd), k.to(cd), v.to(cd), k.to(cd) if kappa is None else kappa.to(cd), c(la, 0.0), c(beta, 1.0),
            state, K ** -0.5 if scale is None else float(scale))


def recurrent_dplr(q, k, v, *, removal_key=None, log_alpha=None, beta=None, scale=None,
                   initial_state=None, output_final_state=False):
    """The diagonal-plus-low-rank recurrence token by token (module docstring)."""
    dtype = v.dtype
    q, k, v, kappa, la, beta, S, scale = _prepare("recurrent_dplr", q, k, v, removal_key, log_alpha, beta, scale,
                                                  initial_state)
    outs = []
    for t in range(q.shape[1]):
        k_t, v_t, kap_t, b_t = k[:, t], v[:, t], kappa[:, t], beta[:, t]  # (B, H, K|V)
        # 1. what the removal key retrieves before the write: κ_tᵀ S_{t−1}
        removed = torch.einsum("bhkv,bhk->bhv", S, kap_t)  # (B, H, V)
        # 2. decay, erase along β ⊙ κ, write β ⊙ k with v
        S = (la[:, t].exp()[..., None] * S - (b_t * kap_t)[..., :, None] * removed[..., None, :]
             + (b_t * k_t)[..., :, None] * v_t[..., None, :])  # (B, H, K, V)
        # 3. read after the write
        outs.append(torch.einsum("bhkv,bhk->bhv", S, scale * q[:, t]))  # (B, H, V)
    o = torch.stack(outs, 1)  # (B, T, H, V)
    return o.to(dtype), (S if output_final_state else None)


def chunk_dplr(q, k, v, *, removal_key=None, log_alpha=None, beta=None, scale=None,
               initial_state=None, output_final_state=False, chunk_size=None, compile=False):
    """Chunkwise diagonal plus low rank; same semantics as ``recurrent_dplr``.

    T need not be a multiple of chunk_size (padded with β = 0, α = 1). chunk_size None →
    ``delta_chunk.default_chunk_size(K)``. A non-finite input at position p never reaches o_{<p}
    (``isolation.py``); an empty batch (B = 0) gives empty outputs. compile: the same groups fused by
    torch.compile (``compiled.py``).
    """
    dtype = v.dtype
    q, k, v, kappa, la, beta, S0, scale = _prepare("chunk_dplr", q, k, v, removal_key, log_alpha, beta, scale,
                                                   initial_state)
    C = check_chunk_size("chunk_dplr", chunk_size, default_chunk_size(q.shape[-1]))
    if q.shape[0] == 0:
        return v.new_empty(v.shape).to(dtype), (S0 if output_final_state else None)
    o, S = chunk_low_rank(q, k, v, la, beta, kappa, S0, scale, C, compile)
    if spread_possible(S) and not spread_possible(S0):  # a non-finite input stays out of earlier outputs
        p = first_non_finite(q, k, v, kappa, la, beta)
        o = keep_finite_prefix(o, p, lambda p: chunk_low_rank(*(x[:, :p] for x in (q, k, v, la, beta, kappa)),
                                                              S0, scale, C, compile)[0])
    return o.to(dtype), (S if output_final_state else None)
