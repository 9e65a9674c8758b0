"""Chunkwise forms of the delta-rule family through the WY/UT representation.

Equations and the public entry points are in ``delta.py``; this file holds the
chunk algebra on validated inputs (compute dtype, q already scaled).

Derivation (one head, one chunk of C tokens, start state S_[n]). Every member
of the family writes S_t = diag(a_t) S_{t−1} + k_t u_tᵀ with the correction
u_t = β_t (v_t − S̄_tᵀ k_t), where the erase reads S̄_t = diag(a_t) S_{t−1}
(Gated DeltaNet, "erase reads decayed") or S̄_t = S_{t−1} (joint variant).
Let G_t = Σ_{s≤t} log a_s (cumulative from the chunk start, inclusive) and
E_t = G_t (decayed read) or G_{t−1} (joint). Unrolling inside the chunk,

    S_t   = e^{G_t} ⊙ S_[n] + Σ_{s≤t} (e^{G_t − G_s} ⊙ k_s) u_sᵀ
    u_t   = β_t v_t − β_t (e^{E_t} ⊙ k_t)ᵀ S_[n] − Σ_{s<t} β_t k_tᵀ (e^{E_t − G_s} ⊙ k_s) u_s,

so with A_ts = β_t Σ_κ k_tκ k_sκ e^{E_tκ − G_sκ} (s < t, strictly lower) the UT
transform T = (I + A)⁻¹ gives (REFERENCES.md §1)

    U = T (β ⊙ V),   W = T (β ⊙ e^{E} ⊙ K),   u = U − W S_[n]                 (1)
    O = (Q ⊙ e^{G}) S_[n] + P u,   P_ts = Σ_κ q_tκ k_sκ e^{G_tκ − G_sκ}, s ≤ t   (2)
    S_[n+1] = e^{G_C} ⊙ S_[n] + (e^{G_C − G} ⊙ K)ᵀ u                            (3)

Scalar decay (one a_t per head) makes the pairwise factors one [C, C] matrix
D_ts = e^{g_t − g_s} and A = diag(β) (K Kᵀ ⊙ D) (the erase reads the decayed
state). All chunks' K Kᵀ, Q Kᵀ, the triangular inverses (by blocks, batched
over chunks: ``_lower_block_inverse``) and (2)'s P are computed at once; only
u = U − W S_[n] and (3) run sequentially over chunks, and (2)'s state term is
one batched matmul against the stacked chunk-start states afterwards.

Numerics (log_alpha ≤ 0): every exponent evaluated is a difference
G_later − G_earlier ≤ 0, so nothing overflows whatever the decay; a factor
underflows to 0 only when the true weight is below the dtype's tiny. Per-key
decay cannot factor A or P as (k e^{E}) (k e^{−G})ᵀ stably (e^{−G} overflows
under strong decay). Instead each chunk is split into sub-chunks of s tokens
(the largest divisor of C that is ≤ 16): diagonal [s, s] blocks get the explicit
[s, s, K] pairwise decays, and an off-diagonal block (rows in sub-chunk j,
columns before it) factorises through the boundary r_j = G at the last token of
sub-chunk j − 1: (x_t e^{E_t − r_j}) · (k_s e^{r_j − G_s}), both exponents ≤ 0.
Memory is O(T·(C/s + s)·K) per head for the pairwise terms; no [T, T] tensor.
log_alpha must be finite (α = 0 exactly gives NaN in the differences).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["chunk_scalar_decay", "chunk_key_decay"]

_BASE_BLOCK = 16  # triangular inverse: diagonal blocks inverted by forward substitution
_SUB_CHUNK = 16  # per-key decay: largest sub-chunk (a divisor of chunk_size) with explicit [s, s, K] decays


def _chunks(x: torch.Tensor, C: int) -> torch.Tensor:
    """[B, T, H, ...] -> [N, B*H, C, ...], zero-padded at the end to N = ceil(T / C) chunks.

    Zero padding means β = 0 (no write) and log α = 0 (no decay): padded tokens leave S unchanged.
    """
    B, T, H = x.shape[:3]
    N = -(-T // C)
    x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, N * C - T))  # (B, N*C, H, ...)
    x = x.reshape(B, N, C, H, *x.shape[3:])  # (B, N, C, H, ...)
    x = x.permute(1, 0, 3, 2, *range(4, x.dim()))  # (N, B, H, C, ...)
    return x.reshape(N, B * H, C, *x.shape[4:])  # (N, B*H, C, ...)


def _unchunk(o: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """[N, B*H, C, V] -> [B, T, H, V] (drops the padding)."""
    N, BH, C, V = o.shape
    o = o.reshape(N, B, BH // B, C, V).permute(1, 0, 3, 2, 4)  # (B, N, C, H, V)
    return o.reshape(B, N * C, BH // B, V)[:, :T]  # (B, T, H, V)


def _lower_block_inverse(L: torch.Tensor, base: int = _BASE_BLOCK) -> torch.Tensor:
    """(I + L)⁻¹ for strictly lower-triangular L [..., C, C], by blocks (no autograd).

    Diagonal blocks of b = min(base, C) rows are inverted by forward substitution,
    row i of T being e_i − L_{i,<i} T_{<i} (one batched product per row, over all
    blocks of all chunks); pairs of inverted blocks then merge level by level,
        [[T₁, 0], [L₂₁, T₂]]-system  →  [[T₁, 0], [−T₂ L₂₁ T₁, T₂]],
    so everything except b small products is a batched matmul. C is padded to
    b·2^J with zero rows of L, which leaves the top-left C×C block of the inverse exact.
    """
    *lead, C, _ = L.shape
    b, n = min(base, C), 1
    while b * n < C:
        n *= 2
    L = F.pad(L, (0, b * n - C, 0, b * n - C))  # (..., b*n, b*n)
    Lb = torch.diagonal(L.reshape(*lead, n, b, n, b), dim1=-4, dim2=-2).movedim(-1, -3)  # (..., n, b, b)
    T = torch.eye(b, dtype=L.dtype, device=L.device).expand_as(Lb).clone()  # (..., n, b, b)
    for i in range(1, b):
        T[..., i, :i] = -(Lb[..., i:i + 1, :i] @ T[..., :i, :i]).squeeze(-2)
    while n > 1:
        s = T.shape[-1]
        L21 = torch.diagonal(L.reshape(*lead, n, s, n, s), offset=-1, dim1=-4, dim2=-2)  # (..., s, s, n−1)
        L21 = L21.movedim(-1, -3)[..., 0::2, :, :]  # (..., n/2, s, s): block (2p+1, 2p)
        T1, T2 = T[..., 0::2, :, :], T[..., 1::2, :, :]  # (..., n/2, s, s)
        T = torch.cat([torch.cat([T1, torch.zeros_like(T1)], dim=-1),
                       torch.cat([-(T2 @ L21 @ T1), T2], dim=-1)], dim=-2)  # (..., n/2, 2s, 2s)
        n //= 2
    return T[..., 0, :C, :C]


class _UnitLowerInverse(torch.autograd.Function):
    """T = (I + strictly_lower(A))⁻¹; backward dA = −strictly_lower(Tᵀ dT Tᵀ) (from dT = −T dA T)."""

    @staticmethod
    def forward(ctx, A):
        T = _lower_block_inverse(A.tril(-1))
        ctx.save_for_backward(T)
        return T

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dT):
        (T,) = ctx.saved_tensors
        return -(T.mT @ dT @ T.mT).tril(-1)


def _ut_transform(A, v, k_erase, beta):
    """T = (I + strictly_lower(A))⁻¹; [U | W] = T [β ⊙ V | β ⊙ k_erase] for all chunks at once (eq. 1).

    A: [N, BH, C, C] (its diagonal and upper triangle are ignored); v: [N, BH, C, V];
    k_erase: [N, BH, C, K] (e^{E} ⊙ K); beta: [N, BH, C]. Returns U [.., C, V], W [.., C, K].
    """
    rhs = torch.cat([v, k_erase], dim=-1) * beta[..., None]  # (N, BH, C, V+K)
    X = _UnitLowerInverse.apply(A) @ rhs  # (N, BH, C, V+K)
    return X.split([v.shape[-1], k_erase.shape[-1]], dim=-1)


def _carry(U, W, k_out, a, S):
    """Sequential part: u_n = U_n − W_n S_[n] (eq. 1), S_[n+1] = a_n ⊙ S_[n] + k_outₙᵀ u_n (eq. 3).

    U: [N, BH, C, V]; W, k_out: [N, BH, C, K]; a: None, [N, BH, 1, 1] or [N, BH, K, 1];
    S: [BH, K, V]. Returns chunk-start states [N, BH, K, V], u [N, BH, C, V] and the final state.
    """
    decays = a.unbind(0) if a is not None else [None] * U.shape[0]
    starts, us = [], []
    for U_n, W_n, k_n, a_n in zip(U.unbind(0), W.unbind(0), k_out.unbind(0), decays):
        starts.append(S)
        u_n = torch.baddbmm(U_n, W_n, S, alpha=-1)  # (BH, C, V)
        S = torch.baddbmm(S if a_n is None else a_n * S, k_n.mT, u_n)  # (BH, K, V)
        us.append(u_n)
    return torch.stack(starts), torch.stack(us), S


def chunk_scalar_decay(q, k, v, log_alpha, beta, state, C: int):
    """Gated delta rule S_t = α_t (I − β_t k kᵀ) S_{t−1} + β_t k vᵀ with scalar (or no) decay, chunkwise.

    q (scaled), k: [B, T, H, K]; v: [B, T, H, V]; log_alpha: None or [B, T, H]; beta: [B, T, H];
    state: [B, H, K, V]. Returns o [B, T, H, V] and the final state [B, H, K, V].
    """
    B, T, H, K = q.shape
    q, k, v = _chunks(q, C), _chunks(k, C), _chunks(v, C)  # (N, BH, C, K|V)
    beta = _chunks(beta, C)  # (N, BH, C)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # (C, C)
    if log_alpha is None:
        D, g = causal.to(q.dtype), None  # (C, C)
    else:
        g = _chunks(log_alpha, C).cumsum(-1)  # (N, BH, C) log decay since the chunk start
        D = torch.where(causal, g[..., :, None] - g[..., None, :], -torch.inf).exp()  # (N, BH, C, C)
    # 1. UT transform, all chunks at once: A = diag(β) (K Kᵀ ⊙ D), erase keys e^{g} ⊙ K
    A = (k @ k.mT) * D  # (N, BH, C, C); β is applied row-wise through the right-hand side
    A = A * beta[..., None]
    U, W = _ut_transform(A, v, k if g is None else k * g.exp()[..., None], beta)
    # 2. intra-chunk read weights P = (Q Kᵀ) ⊙ D, causal including the diagonal
    P = (q @ k.mT) * D  # (N, BH, C, C)
    # 3. sequential over chunks: u = U − W S_[n] and the state carry (eq. 3)
    if g is None:
        q_in, k_out, a = q, k, None
    else:
        q_in = q * g.exp()[..., None]  # (N, BH, C, K)
        k_out = k * (g[..., -1:] - g).exp()[..., None]  # (N, BH, C, K)
        a = g[..., -1].exp()[..., None, None]  # (N, BH, 1, 1)
    starts, u, S = _carry(U, W, k_out, a, state.reshape(B * H, K, -1))
    # 4. read (eq. 2): inter-chunk term against the chunk-start states + intra-chunk term
    o = q_in @ starts + P @ u  # (N, BH, C, V)
    return _unchunk(o, B, T), S.reshape(B, H, K, -1)


def _pairwise(x, Ex, k, G, s: int, strict: bool):
    """M_ts = Σ_κ x_tκ k_sκ e^{Ex_tκ − G_sκ} for s < t (strict) or s ≤ t, stably (module docstring).

    x, Ex, k, G: [N, BH, C, K] with Ex_t ≤ G_{t'} for every t' < t in the chunk
    (Ex_t ≤ G_t as well when not strict). s divides C. Returns [N, BH, C, C].
    """
    *lead, C, K = x.shape
    m = C // s
    blocks = lambda y: y.reshape(*lead, m, s, K)  # noqa: E731  (N, BH, m, s, K)
    xb, Eb, kb, Gb = blocks(x), blocks(Ex), blocks(k), blocks(G)
    # diagonal blocks: explicit [s, s, K] decays
    tri = torch.ones(s, s, dtype=torch.bool, device=x.device).tril(-1 if strict else 0)[..., None]  # (s, s, 1)
    dec = torch.where(tri, Eb[..., :, None, :] - Gb[..., None, :, :], -torch.inf).exp()  # (N, BH, m, s, s, K)
    diag = torch.einsum("...tk,...uk,...tuk->...tu", xb, kb, dec)  # (N, BH, m, s, s)
    # off-diagonal blocks through the boundary r_j = G at the last token of sub-chunk j − 1 (r_0 unused)
    r = F.pad(Gb[..., :-1, -1, :], (0, 0, 1, 0))  # (N, BH, m, K)
    pos = torch.arange(C, device=x.device)
    before = (pos[None, :] < s * torch.arange(m, device=x.device)[:, None])[..., None]  # (m, C, 1)
    left = xb * (Eb - r[..., None, :]).exp()  # (N, BH, m, s, K), exponent ≤ 0
    right = k[..., None, :, :] * torch.where(before, r[..., None, :] - G[..., None, :, :],
                                             -torch.inf).exp()  # (N, BH, m, C, K), exponent ≤ 0
    off = left @ right.mT  # (N, BH, m, s, C), zero on and above the diagonal block
    M = off.reshape(*lead, m, s, m, s) + torch.diag_embed(diag.movedim(-3, -1), dim1=-4, dim2=-2)
    return M.reshape(*lead, C, C)


def _sub_chunk(C: int) -> int:
    return max(d for d in range(1, min(C, _SUB_CHUNK) + 1) if C % d == 0)


def chunk_key_decay(q, k, v, log_alpha, beta, state, C: int, *, erase_reads_decayed: bool):
    """Delta rule with per-key decay S_t = diag(a_t) S_{t−1} + k_t u_tᵀ, chunkwise (eqs. 1-3).

    erase_reads_decayed=False: the joint variant, u_t = β_t (v_t − S_{t−1}ᵀ k_t), i.e.
    S_t = (diag(a_t) − β_t k kᵀ) S_{t−1} + β_t k vᵀ. True: u_t = β_t (v_t − (diag(a_t) S_{t−1})ᵀ k_t).
    q (scaled), k, log_alpha: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H]; state: [B, H, K, V].
    """
    B, T, H, K = q.shape
    q, k, v, la = (_chunks(x, C) for x in (q, k, v, log_alpha))  # (N, BH, C, K|V)
    beta = _chunks(beta, C)  # (N, BH, C)
    G = la.cumsum(-2)  # (N, BH, C, K) inclusive log decay since the chunk start
    E = G if erase_reads_decayed else G - la  # (N, BH, C, K) decay seen by the erase
    s = _sub_chunk(C)
    # 1. UT transform: A_ts = β_t Σ k_t k_s e^{E_t − G_s} (s < t), erase keys e^{E} ⊙ K
    A = _pairwise(k, E, k, G, s, strict=True) * beta[..., None]  # (N, BH, C, C)
    U, W = _ut_transform(A, v, k * E.exp(), beta)
    # 2. intra-chunk read weights P_ts = Σ q_t k_s e^{G_t − G_s} (s ≤ t)
    P = _pairwise(q, G, k, G, s, strict=False)  # (N, BH, C, C)
    # 3. sequential over chunks
    q_in = q * G.exp()  # (N, BH, C, K)
    k_out = k * (G[..., -1:, :] - G).exp()  # (N, BH, C, K)
    a = G[..., -1, :].exp()[..., None]  # (N, BH, K, 1)
    starts, u, S = _carry(U, W, k_out, a, state.reshape(B * H, K, -1))
    # 4. read (eq. 2)
    o = q_in @ starts + P @ u  # (N, BH, C, V)
    return _unchunk(o, B, T), S.reshape(B, H, K, -1)
