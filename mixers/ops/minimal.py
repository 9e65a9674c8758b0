"""Minimal chunkwise forms: the algorithms of ``chunk_hebbian`` and ``chunk_delta_rule`` in numbered
steps, without the fast forms' grouping, in-place and fold-plan optimisations (as mamba_ssm's
``ssd_minimal.py`` is for SSD). Start reading here; tests/mixers/test_minimal.py holds them equal to
the fast forms. Scalar (or no) decay; the chunk layout of every chunk form (``chunking.py``):
[N, B, H, C, ·], every product batched over the leading axes.

Per head, S ∈ R^{K×V}, the read after the write o_t = S_tᵀ (scale·q_t), and inside a chunk of C
tokens g_t = Σ_{s≤t} log α_s (from the chunk start), D_ts = e^{g_t − g_s} for s ≤ t, else 0.

    hebbian  S_t = α_t S_{t−1} + β_t k_t v_tᵀ                (thesis App. A.1, eqs. A.4–A.7, with decay)
    delta    S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ
             (Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence
             Length", §3.2: the WY representation through the UT transform; gated as Gated DeltaNet)
"""
from __future__ import annotations

import torch

from .chunking import chunks, unchunk


def _inputs(q, k, v, log_alpha, beta, scale, initial_state, C):
    """Chunked scale·q, k, v, β [N, B, H, C, 1], g [N, B, H, C, 1], D [N, B, H, C, C]; S [B, H, K, V]."""
    B, T, H, K = q.shape
    beta = q.new_ones(B, T, H) if beta is None else beta
    g = chunks(q.new_zeros(B, T, H) if log_alpha is None else log_alpha, C).cumsum(-1)[..., None]
    D = (g - g.mT).tril().exp().tril()  # e^{g_t − g_s} for s ≤ t (exponents ≤ 0), 0 above
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state
    scale = K ** -0.5 if scale is None else scale
    return chunks(scale * q, C), chunks(k, C), chunks(v, C), chunks(beta, C)[..., None], g, D, S


def chunk_hebbian_minimal(q, k, v, *, log_alpha=None, beta=None, scale=None, initial_state=None, chunk_size=16):
    """``chunk_hebbian`` with scalar decay (log_alpha [B, T, H] or None): o [B, T, H, V], S [B, H, K, V]."""
    T = q.shape[1]
    q, k, v, beta, g, D, S = _inputs(q, k, v, log_alpha, beta, scale, initial_state, chunk_size)
    k = beta * k  # β_t k_t v_tᵀ = (β_t k_t) v_tᵀ
    # 1. intra-chunk outputs (Q Kᵀ ⊙ D) V, all chunks at once (eq. A.7 within a chunk)
    o = (q @ k.mT * D) @ v  # [N, B, H, C, V]
    # 2. each chunk's write, decayed to the chunk's end: (K ⊙ e^{g_C − g})ᵀ V (eq. A.6)
    writes = (k * (g[..., -1:, :] - g).exp()).mT @ v  # [N, B, H, K, V]
    for n in range(o.shape[0]):
        # 3. the state at the chunk's start, read by the decayed queries: (Q ⊙ e^{g}) S (eq. A.7)
        o[n] += (q[n] * g[n].exp()) @ S
        # 4. the state carried to the next chunk: S ← e^{g_C} S + write (eq. A.6)
        S = g[n, ..., -1:, :].exp() * S + writes[n]
    return unchunk(o, T), S


def chunk_delta_minimal(q, k, v, *, log_alpha=None, beta=None, scale=None, initial_state=None, chunk_size=16):
    """``chunk_delta_rule`` with scalar decay (log_alpha [B, T, H] or None): o [B, T, H, V], S [B, H, K, V]."""
    T = q.shape[1]
    q, k, v, beta, g, D, S = _inputs(q, k, v, log_alpha, beta, scale, initial_state, chunk_size)
    eye = torch.eye(q.shape[-2], dtype=q.dtype)
    # 1. UT transform: T = (I + A)⁻¹ with A = strictly_lower(diag(β) (K Kᵀ ⊙ D)), all chunks at once
    A = (beta * (k @ k.mT) * D).tril(-1)  # [N, B, H, C, C]
    Tinv = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False)
    # 2. WY representation: U = T (β ⊙ V), W = T (β e^{g} ⊙ K); the erase reads the decayed state
    U, W = Tinv @ (beta * v), Tinv @ (beta * g.exp() * k)  # [N, B, H, C, V], [N, B, H, C, K]
    o = torch.empty_like(U)
    for n in range(U.shape[0]):
        # 3. the corrections against the chunk-start state: u = U − W S
        u = U[n] - W[n] @ S  # [B, H, C, V]
        # 4. read the state and this chunk's corrections: O = (Q ⊙ e^{g}) S + (Q Kᵀ ⊙ D) u
        o[n] = (q[n] * g[n].exp()) @ S + (q[n] @ k[n].mT * D[n]) @ u
        # 5. carry the state: S ← e^{g_C} S + (K ⊙ e^{g_C − g})ᵀ u
        S = g[n, ..., -1:, :].exp() * S + (k[n] * (g[n, ..., -1:, :] - g[n]).exp()).mT @ u
    return unchunk(o, T), S
