"""Hebbian family: linear attention, RetNet, Mamba2 (SSD) and GLA (REFERENCES.md §1).

One update covers the four mixers; per head, with state S_t ∈ R^{K×V}:

    S_t = diag(α_t) S_{t−1} + β_t k_t v_tᵀ          (write)
    o_t = S_tᵀ (scale · q_t)                         (read, after the write)

    linear attention   α_t = 1,  β_t = 1
    RetNet             α_t = γ_h = 1 − 2^(−5−h)  (fixed scalar per head)
    Mamba2 / SSD       α_t = exp(Δ_t A) (scalar), β_t = Δ_t, q = C, k = B, v = x, scale 1 (+ D x)
    GLA                α_t ∈ (0, 1]^K per key row of S (log α = logsigmoid(x W) / 16)

Gates arrive in log space: ``log_alpha`` is None, [B, T, H] (scalar) or
[B, T, H, K] (per key); ``beta`` is None (= 1) or [B, T, H] (linear).

Two forms with the same contract:

* ``recurrent_hebbian`` loops over time (numbered steps follow the equation).
* ``chunk_hebbian`` is the chunkwise-parallel form (thesis Appendix A.1, eq.
  A.4–A.7, with decay as in GLA / SSD). Inside a chunk of C tokens with
  cumulative log decay g_i = Σ_{s≤i} log α_s (from the chunk start):

      O = (Q ⊙ e^{g}) S_[n]  +  (Q Kᵀ ⊙ D) V,   D_ij = e^{g_i − g_j} [i ≥ j]     (A.7 with decay)
      S_[n+1] = e^{g_C} S_[n] + (K ⊙ e^{g_C − g})ᵀ V                               (A.6 with decay)

  (for per-key decay, D_ij is per key and lives inside the K-contraction).

Numerics of ``chunk_hebbian`` (α ∈ (0, 1], i.e. finite log_alpha ≤ 0). Every exponent
it evaluates is ≤ 0 except the factor e^{−g} of the factorised path below. The
intra-chunk weights e^{g_i − g_j} have two exact paths, chosen per group of chunks by
``_factorizable`` from the size of the decay (a documented numeric rule, never from T):

* factorised, when every |g| ≤ log(dtype max) / 4 (22 in float32, 177 in float64):
  e^{g_i − g_j} = e^{g_i} · e^{−g_j}, so the weights come from one matmul
  (Q ⊙ e^{g})(K ⊙ e^{−g})ᵀ; factors, the discarded future entries and the gradients
  stay within e^{±44} in float32, far inside the range. As with any prefix-sum
  difference, an exponent carries an error of about |g|·eps (≤ 22·eps), so weights are
  exact to ~1e-6 relative in float32.
* explicit, otherwise (strong decay): every exponent is a direct partial sum of log α
  (segment sums Σ_{j<s≤i} by a masked cumsum, suffix sums Σ_{s>j} by a reversed cumsum),
  so its error scales with its own size, not with the chunk's total decay. Scalar decay
  builds the [C, C] matrix D; per-key decay builds each chunk's [C, C] weight matrix by
  recursive halving (``_intra_per_key``): the cross block of two halves factorises at
  their boundary with both exponents ≤ 0. No [C, C, K] tensor is formed. A weight
  underflows to 0 only when its true value is below the dtype's tiny.

No [T, T] tensor is formed anywhere: memory is O(T·(C + K·V / C)) per head.
log α = −inf (α = 0 exactly) gives NaN; positive log_alpha (growth) is accepted,
but the explicit path is then only safe while e^{Σ log α} over a chunk stays in range.
The backward is autograd's, except for the chunk-to-chunk state carry, which has a
hand-written reverse loop (``_CarryStates``; first-order gradients only).

Precision: bf16/fp16 inputs are computed and the state accumulated in float32;
``o`` is cast back to the input dtype and the final state is returned in
float32. float32 and float64 compute in their own dtype.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from . import groups
from .contract import check_chunk_size, check_matrix_inputs

__all__ = ["recurrent_hebbian", "chunk_hebbian", "default_chunk_size"]


def default_chunk_size(K: int) -> int:
    """C when the caller passes chunk_size=None: min(64, max(16, K)); narrow heads get short chunks,
    since the [C, C] intra-chunk terms outweigh the [K, V] state there."""
    return min(64, max(16, K))


def recurrent_hebbian(q, k, v, *, log_alpha=None, beta=None, scale=None,
                      initial_state=None, output_final_state=False):
    """Hand-written hebbian recurrence, one token at a time (REFERENCES.md §1).

    q, k: [B, T, H, K]; v: [B, T, H, V]; log_alpha: None, [B, T, H] or [B, T, H, K];
    beta: None or [B, T, H]; initial_state: None or [B, H, K, V]; scale: K**-0.5 if None.
    Returns o [B, T, H, V] (dtype of q) and S [B, H, K, V] if output_final_state else None.
    """
    cd = check_matrix_inputs("recurrent_hebbian", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    out_dtype = q.dtype
    S = q.new_zeros(B, H, K, V, dtype=cd) if initial_state is None else initial_state.to(cd)
    # per-token slices via unbind (one backward node per tensor, so the backward stays linear in T)
    steps = lambda x: x.to(cd).unbind(1) if x is not None else [None] * T  # noqa: E731
    outs = []
    for q_t, k_t, v_t, la_t, b_t in zip(*map(steps, (q, k, v, log_alpha, beta))):
        # 1. retain: S <- diag(α_t) S, α_t one scalar per head or one factor per key row of S
        if la_t is not None:
            alpha = la_t.exp()  # (B, H) or (B, H, K)
            S = S * (alpha[..., None, None] if la_t.dim() == 2 else alpha[..., None])
        # 2. write: S <- S + β_t k_t v_tᵀ
        k_t = k_t if b_t is None else b_t[..., None] * k_t  # (B, H, K)
        S = S + k_t[..., :, None] * v_t[..., None, :]  # (B, H, K, V)
        # 3. read: o_t = S_tᵀ (scale · q_t)
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q_t, S))  # (B, H, V)
    o = torch.stack(outs, dim=1).to(out_dtype)  # (B, T, H, V)
    return o, (S if output_final_state else None)


def _chunked(x: torch.Tensor, C: int, dtype: torch.dtype, copy: bool = True) -> torch.Tensor:
    """[B, T, H, ...] -> [B, H, N, C, ...] in ``dtype``, zero-padded at the end to N = ceil(T / C)
    chunks; contiguous (one copy) if ``copy``, else a strided view where no padding is needed."""
    B, T, H = x.shape[:3]
    N = -(-T // C)
    if N * C != T:
        x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, N * C - T))  # (B, N*C, H, ...)
    x = x.reshape(B, N, C, H, *x.shape[3:]).movedim(3, 1)  # (B, H, N, C, ...)
    if not copy:
        return x.to(dtype)
    return x.contiguous() if x.dtype == dtype else x.to(dtype, memory_format=torch.contiguous_format)


def _bmm(a, b, *, alpha=1.0, add=None):
    """alpha · (a @ b) [+ add] over the leading dims in one BLAS call (scale and sum inside the GEMM).

    a: [..., M, P] and b: [..., P, Q] with the same leading dims, each foldable into one batch dim.
    """
    a3, b3 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])  # (batch, M, P), (batch, P, Q)
    if add is not None:
        out = torch.baddbmm(add.reshape(-1, *add.shape[-2:]), a3, b3, alpha=alpha)
    elif alpha == 1.0:
        out = torch.bmm(a3, b3)
    else:
        out = torch.baddbmm(a3.new_zeros(()), a3, b3, beta=0.0, alpha=alpha)
    return out.reshape(*a.shape[:-2], *out.shape[-2:])  # (..., M, Q)


def _suffix_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Exclusive suffix sums y_j = Σ_{s>j} x_s along ``dim``, summed directly (not as a
    difference of prefix sums), so small sums after a large one keep full precision."""
    inclusive = x.flip(dim).cumsum(dim).flip(dim)  # Σ_{s≥j} x_s
    return torch.cat([inclusive.narrow(dim, 1, x.shape[dim] - 1), torch.zeros_like(x.narrow(dim, 0, 1))], dim)


def _intra_scalar(q, k, v, la, scale):
    """Intra-chunk term scale · (Q Kᵀ ⊙ D) V with D_ij = e^{Σ_{j<s≤i} log α_s} [i ≥ j] (eq. A.7).

    q, k: [B, H, N, C, K]; v: [B, H, N, C, V]; la: None or [B, H, N, C] log decay per token.
    The exponents are segment sums (masked cumsum), ≤ 0 and accurate relative to themselves.
    """
    A = _bmm(q, k.transpose(-1, -2), alpha=scale)  # (B, H, N, C, C)
    if la is not None:
        C = la.shape[-1]
        segments = la[..., :, None].expand(*la.shape, C).tril(-1)  # (B, H, N, C, C): [i, j] = log α_i [i > j]
        A = A * segments.cumsum(dim=-2).exp_()  # [i, j] = e^{Σ_{j<s≤i} log α_s}; future entries masked below
    return _bmm(A.tril_(), v)  # (B, H, N, C, V)


def _intra_per_key(q, k, v, la, scale):
    """Intra-chunk term with per-key decay, o_i = scale · Σ_{j≤i} Σ_κ q_iκ k_jκ e^{Σ_{j<s≤i} log α_sκ} v_j.

    q, k, la: [B, H, N, C, K]; v: [B, H, N, C, V]. Builds the [C, C] weight matrix of each
    chunk by recursive halving: a block of b tokens is [[M_F, 0], [A, M_G]], where M_F, M_G
    are its halves' matrices and the cross term factorises at their boundary,
    A = (Q_G ⊙ e^{prefix sums of log α in G})(K_F ⊙ e^{exclusive suffix sums in F})ᵀ:
    every exponent is a direct partial sum, ≤ 0. Chunks are zero-padded to a power of two.
    """
    *lead, C, K = q.shape
    C2 = 1 << (C - 1).bit_length()
    if C2 != C:  # padded tokens: k = v = 0 and log α = 0
        q, k, v, la = (F.pad(x, (0, 0, 0, C2 - C)) for x in (q, k, v, la))  # (.., C2, ·)
    M = (q * k).sum(-1)[..., None, None]  # (.., C2, 1, 1): blocks of one token, weight e^0 = 1
    b = 2
    while b <= C2:
        h = b // 2
        halves = lambda x: x.reshape(*lead, C2 // b, 2, h, x.shape[-1])  # (.., C2/b, 2, h, ·)
        qb, kb, lb = halves(q), halves(k), halves(la)
        q_G = qb[..., 1, :, :] * lb[..., 1, :, :].cumsum(dim=-2).exp()  # (.., C2/b, h, K)
        k_F = kb[..., 0, :, :] * _suffix_sum(lb[..., 0, :, :], dim=-2).exp()  # (.., C2/b, h, K)
        A = q_G @ k_F.transpose(-1, -2)  # (.., C2/b, h, h)
        M = M.reshape(*lead, C2 // b, 2, h, h)
        top = F.pad(M[..., 0, :, :], (0, h))  # (.., C2/b, h, b)
        bottom = torch.cat([A, M[..., 1, :, :]], dim=-1)  # (.., C2/b, h, b)
        M = torch.cat([top, bottom], dim=-2)  # (.., C2/b, b, b)
        b *= 2
    return _bmm(M.reshape(*lead, C2, C2), v, alpha=scale)[..., :C, :]  # (B, H, N, C, V)


class _CarryStates(torch.autograd.Function):
    """Chunk-to-chunk recurrence S_[n+1] = a_n ⊙ S_[n] + U_n (eq. A.6 with decay).

    A loop over the N chunks in both directions; the backward is the reverse recurrence
    dS_[n] = a_n ⊙ dS_[n+1] + dStarts_n, with dU_n = dS_[n+1] and da_n = Σ dS_[n+1] ⊙ S_[n].
    S0: [B, H, K, V]; U: [B, H, N, K, V]; a: None, [B, H, N, 1, 1] or [B, H, N, K, 1].
    Returns the states at every chunk start [B, H, N, K, V] and the final state [B, H, K, V].
    """

    @staticmethod
    def forward(ctx, S0, U, a):
        N = U.shape[2]
        starts = torch.empty_like(U)  # (B, H, N, K, V); each step writes S_[n+1] in place
        starts[:, :, 0] = S0
        for n in range(N):
            out = starts[:, :, n + 1] if n + 1 < N else None
            if a is None:
                S = torch.add(U[:, :, n], starts[:, :, n], out=out)
            else:
                S = torch.addcmul(U[:, :, n], a[:, :, n], starts[:, :, n], out=out)
        ctx.save_for_backward(starts, a)
        return starts, S

    @staticmethod
    @once_differentiable
    def backward(ctx, d_starts, d_final):
        starts, a = ctx.saved_tensors
        N = starts.shape[2]
        dU = torch.empty_like(starts)  # (B, H, N, K, V): dU_n = dS_[n+1]
        dU[:, :, N - 1] = d_final
        for n in reversed(range(N)):
            out = dU[:, :, n - 1] if n > 0 else None  # dS_[n]
            if a is None:
                dS = torch.add(d_starts[:, :, n], dU[:, :, n], out=out)
            else:
                dS = torch.addcmul(d_starts[:, :, n], a[:, :, n], dU[:, :, n], out=out)
        da = None
        if a is not None and ctx.needs_input_grad[2]:
            da = (dU * starts).sum(-1, keepdim=True)  # (B, H, N, K, 1)
            da = da.sum(-2, keepdim=True) if a.shape[-2] == 1 else da  # scalar decay: (B, H, N, 1, 1)
        return dS, dU, da


def _weighted_keys(k, beta, w=None):
    """β ⊙ w ⊙ k as a contiguous [B, H, N, C, K] tensor, reading the strided view k once.

    beta: None or [B, H, N, C, 1]; w: None, [B, H, N, C, 1] or [B, H, N, C, K]. The contiguous
    factor comes first, so the product takes its layout.
    """
    if beta is None and w is None:
        return k.contiguous()
    factor = beta if w is None else w if beta is None else beta * w
    return factor * k


def _chunks_forward(q, k, v, beta, la, S0, scale):
    """Outputs [B, H, N, C, V] and final state from chunked inputs.

    q, k: [B, H, N, C, K] strided views (read once by the first product that uses them);
    v: [B, H, N, C, V]; beta: None or [B, H, N, C, 1]; la: None, [B, H, N, C] or
    [B, H, N, C, K], the log decay per token. β scales k: β_t k_t v_tᵀ = (β_t k_t) v_tᵀ.
    """
    bk = functools.partial(_weighted_keys, k, beta)
    if la is None:
        q, k = q.contiguous(), bk(None)
        U = _bmm(k.transpose(-1, -2), v)  # (B, H, N, K, V): U_n = K_nᵀ V_n (eq. A.6)
        states, S = _CarryStates.apply(S0, U, None)  # (B, H, N, K, V)
        return _bmm(q, states, alpha=scale, add=_intra_scalar(q, k, v, None, scale)), S
    per_key = la.dim() == 5
    g = la.cumsum(dim=3)  # (B, H, N, C[, K]): cumulative log decay from the chunk start
    gk, lak = (g, la) if per_key else (g[..., None], la[..., None])  # (B, H, N, C, K or 1)
    g_end = gk[..., -1:, :]  # (B, H, N, 1, K or 1): decay over the whole chunk
    if _factorizable(g):  # e^{g_i − g_j} = e^{g_i} · e^{−g_j}, all factors well inside the range
        q_g = gk.exp() * q  # (B, H, N, C, K): queries decayed from the chunk start
        A = _bmm(q_g, bk((-gk).exp()).transpose(-1, -2), alpha=scale)  # (B, H, N, C, C)
        intra = _bmm(A.tril_(), v)
        U = _bmm(bk((g_end - gk).exp()).transpose(-1, -2), v)  # (B, H, N, K, V)
    else:  # explicit: every exponent a direct partial sum of log α, ≤ 0
        q = q.contiguous()
        q_g, kc = q * gk.exp(), bk(None)
        intra = _intra_per_key(q, kc, v, la, scale) if per_key else _intra_scalar(q, kc, v, la, scale)
        U = _bmm((kc * _suffix_sum(lak, dim=-2).exp()).transpose(-1, -2), v)  # Σ_{s>j} log α_s
    states, S = _CarryStates.apply(S0, U, g_end.transpose(-1, -2).exp())  # a_n: (B, H, N, K or 1, 1)
    return _bmm(q_g, states, alpha=scale, add=intra), S  # (B, H, N, C, V)


def _factorizable(g: torch.Tensor) -> bool:
    """Whether the intra-chunk decay may be split as e^{g_i} e^{−g_j}: every |g| (cumulative
    log decay from its chunk start) ≤ log(max of the dtype) / 4, i.e. 22 in float32, 177 in
    float64, so factors, products and their gradients stay far from overflow and underflow."""
    return bool(g.detach().abs().amax() <= math.log(torch.finfo(g.dtype).max) / 4)


def chunk_hebbian(q, k, v, *, log_alpha=None, beta=None, scale=None,
                  initial_state=None, output_final_state=False, chunk_size=None):
    """Chunkwise-parallel hebbian memory (thesis App. A.1 with GLA / SSD decay).

    Same contract and results as ``recurrent_hebbian``; T need not divide chunk_size
    (zero padding: a padded token has k = v = 0 and α = 1, so it changes nothing).
    Per chunk n with cumulative log decay g from the chunk start:
        O_[n] = scale · ((Q ⊙ e^{g}) S_[n] + (Q Kᵀ ⊙ D) V),   S_[n+1] = e^{g_C} S_[n] + (K ⊙ e^{g_C − g})ᵀ V.
    Cost O(T·C·(K + V)) flops in batched matmuls plus a python loop over T / C chunks
    for the state carry; memory O(T·(C + K·V / C)) (no [T, T] tensor). Long sequences run
    in groups of whole chunks (``groups.py``: cache-sized intermediates, same result).
    Numerics: module docstring.
    Returns o [B, T, H, V] (dtype of q) and S [B, H, K, V] if output_final_state else None.
    """
    cd = check_matrix_inputs("chunk_hebbian", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    B, T, H, K = q.shape
    chunk_size = check_chunk_size("chunk_hebbian", chunk_size, default_chunk_size(K))
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    S0 = q.new_zeros(B, H, K, V, dtype=cd) if initial_state is None else initial_state.to(cd)

    def group(q, k, v, log_alpha, beta, S):  # one group of whole chunks (groups.py), t tokens
        C, t = chunk_size, q.shape[1]
        qc, kc = _chunked(q, C, cd, copy=False), _chunked(k, C, cd, copy=False)  # views
        vc = _chunked(v, C, cd)  # (B, H, N, C, V)
        bc = None if beta is None else _chunked(beta, C, cd)[..., None]  # (B, H, N, C, 1)
        la = None if log_alpha is None else _chunked(log_alpha, C, cd)  # (B, H, N, C[, K])
        o, S = _chunks_forward(qc, kc, vc, bc, la, S, scale)  # (B, H, N, C, V)
        return o.movedim(1, 3).reshape(B, -1, H, V)[:, :t], S  # (B, t, H, V)

    o, S = groups.over_groups(group, (q, k, v, log_alpha, beta), S0, groups.group_step(chunk_size))
    return o.contiguous().to(v.dtype), (S if output_final_state else None)
