"""Hebbian family: linear attention (Katharopoulos et al. 2020), RetNet (Sun et al. 2023),
Mamba2 / SSD (Dao & Gu 2024) and GLA (Yang et al. 2024).

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
  (scalar: segment sums Σ_{j<s≤i} as float64 differences of prefix sums, rounded once
  (``decay.segment_sums``), suffix sums
  Σ_{s>j} their last row; per key: suffix sums by a reversed cumsum),
  so its error scales with its own size, not with the chunk's total decay. Scalar decay
  builds the [C, C] matrix D; per-key decay builds each chunk's [C, C] weight matrix by
  recursive halving (``_intra_per_key``): the cross block of two halves factorises at
  their boundary with both exponents ≤ 0. No [C, C, K] tensor is formed. A weight
  underflows to 0 only when its true value is below the dtype's tiny.

No [T, T] tensor is formed anywhere: memory is O(T·(C + K·V / C)) per head.
log α below the dtype's underflow floor (α exactly 0, down to −inf) is raised to the
floor (``decay.floor_log_decay``: the same α and gradients, finite exponents), so the chunk
form is finite wherever the recurrence is. Positive log_alpha (growth) is accepted, but
the explicit path is then only safe while e^{Σ log α} over a chunk stays in range.
The backward is autograd's, except for the chunk-to-chunk state carry, which has a
hand-written reverse loop (``_CarryStates``; first-order gradients only).

Dtypes (contract.py): the inputs may differ in float dtype; they compute in their promotion with
bf16/fp16 raised to float32 (the state accumulates in float32 at least). ``o`` is returned in v's
dtype, the final state in the compute dtype.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from . import groups
from .chunking import chunks
from .compiled import island
from .contract import autocast_off, check_chunk_size, check_matrix_inputs
from .decay import floor_log_decay, segment_sums
from .inplace import records_grad, scaled
from .isolation import first_non_finite, keep_finite_prefix, spread_possible

__all__ = ["recurrent_hebbian", "chunk_hebbian", "default_chunk_size"]


def default_chunk_size(K: int) -> int:
    """C when the caller passes chunk_size=None: min(64, max(16, K)); narrow heads get short chunks,
    since the [C, C] intra-chunk terms outweigh the [K, V] state there."""
    return min(64, max(16, K))


def recurrent_hebbian(q, k, v, *, log_alpha=None, beta=None, scale=None,
                      initial_state=None, output_final_state=False):
    """Hand-written hebbian recurrence, one token at a time (the equation of the module docstring).

    q, k: [B, T, H, K]; v: [B, T, H, V]; log_alpha: None, [B, T, H] or [B, T, H, K];
    beta: None or [B, T, H]; initial_state: None or [B, H, K, V]; scale: K**-0.5 if None.
    Returns o [B, T, H, V] (dtype of v) and S [B, H, K, V] if output_final_state else None.
    """
    cd = check_matrix_inputs("recurrent_hebbian", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    out_dtype = v.dtype
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


def _bmm(a, b, *, alpha=1.0, add=None, in_place=False):
    """alpha · (a @ b) [+ add] over the leading dims in one BLAS call (scale and sum inside the GEMM).

    a: [..., M, P] and b: [..., P, Q] with the same leading dims, each foldable into one batch dim.
    in_place: accumulate into ``add`` (a fresh intermediate) and return it, when add is contiguous.
    """
    a3, b3 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])  # (batch, M, P), (batch, P, Q)
    if add is not None and in_place and add.is_contiguous():
        add.view(-1, *add.shape[-2:]).baddbmm_(a3, b3, alpha=alpha)
        return add
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


def _causal(A: torch.Tensor, in_place: bool) -> torch.Tensor:
    """The lower triangle (i ≥ j) of A [..., C, C]; in place without autograd (A is then a fresh product,
    possibly a view of one: under autograd an in-place write into a view records a CopySlices node)."""
    return A.tril_() if in_place else A.tril()


def _intra_scalar(q, k, v, d, scale, in_place=False):
    """Intra-chunk term scale · (Q Kᵀ ⊙ D) V with D_ij = e^{Σ_{j<s≤i} log α_s} [i ≥ j] (eq. A.7).

    q, k: [N, B, H, C, K]; v: [N, B, H, C, V]; d: None (no decay) or [N, B, H, C, C], the
    weights e^{segment sums} (``decay.segment_sums``; any values above the diagonal, masked here).
    in_place: weight the fresh Q Kᵀ product in place (no autograd).
    """
    A = _bmm(q, k.transpose(-1, -2), alpha=scale)  # (N, B, H, C, C)
    if d is not None:
        A = scaled(A, d, in_place)
    return _bmm(_causal(A, in_place), v)  # (N, B, H, C, V)


def _intra_per_key(q, k, v, la, scale):
    """Intra-chunk term with per-key decay, o_i = scale · Σ_{j≤i} Σ_κ q_iκ k_jκ e^{Σ_{j<s≤i} log α_sκ} v_j.

    q, k, la: [N, B, H, C, K]; v: [N, B, H, C, V]. Builds the [C, C] weight matrix of each
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
    return _bmm(M.reshape(*lead, C2, C2), v, alpha=scale)[..., :C, :]  # (N, B, H, C, V)


class _CarryStates(torch.autograd.Function):
    """Chunk-to-chunk recurrence S_[n+1] = a_n ⊙ S_[n] + U_n (eq. A.6 with decay).

    A loop over the N chunks in both directions (per-chunk views from one ``unbind``); the
    backward is the reverse recurrence dS_[n] = a_n ⊙ dS_[n+1] + dStarts_n, with
    dU_n = dS_[n+1] and da_n = Σ dS_[n+1] ⊙ S_[n].
    S0: [B, H, K, V]; U: [N, B, H, K, V]; a: None, [N, B, H, 1, 1] or [N, B, H, K, 1].
    Returns the states at every chunk start [N, B, H, K, V] and the final state [B, H, K, V].
    (A closed form, one [N + 1, N] matmul with segment-sum weights, measured 2.6x slower
    per group of 16 chunks than this loop.)
    """

    @staticmethod
    def forward(ctx, S0, U, a):
        N = U.shape[0]
        starts = torch.empty_like(U)  # (N, B, H, K, V); each step writes S_[n+1] in place
        Ss, Us = starts.unbind(0), U.unbind(0)
        as_ = (None,) * N if a is None else a.unbind(0)
        Ss[0].copy_(S0)
        for n in range(N):
            out = Ss[n + 1] if n + 1 < N else None
            if as_[n] is None:
                S = torch.add(Us[n], Ss[n], out=out)
            else:
                S = torch.addcmul(Us[n], as_[n], Ss[n], out=out)
        ctx.save_for_backward(starts, a)
        return starts, S

    @staticmethod
    @once_differentiable
    @autocast_off
    def backward(ctx, d_starts, d_final):
        starts, a = ctx.saved_tensors
        N = starts.shape[0]
        dU = torch.empty_like(starts)  # (N, B, H, K, V): dU_n = dS_[n+1]
        dUs, dSt = dU.unbind(0), d_starts.unbind(0)
        as_ = (None,) * N if a is None else a.unbind(0)
        dUs[N - 1].copy_(d_final)
        for n in reversed(range(N)):
            out = dUs[n - 1] if n > 0 else None  # dS_[n]
            if as_[n] is None:
                dS = torch.add(dSt[n], dUs[n], out=out)
            else:
                dS = torch.addcmul(dSt[n], as_[n], dUs[n], out=out)
        da = None
        if a is not None and ctx.needs_input_grad[2]:
            da = (dU * starts).sum(-1, keepdim=True)  # (N, B, H, K, 1)
            da = da.sum(-2, keepdim=True) if a.shape[-2] == 1 else da  # scalar decay: (N, B, H, 1, 1)
        return dS, dU, da


# runs eagerly inside a compiled form (compiled.py: its in-place loop would be traced as copies of the states)
_carry_states = island(_CarryStates.apply)


def _weighted_keys(k, beta, w=None):
    """β ⊙ w ⊙ k as a contiguous [N, B, H, C, K] tensor, reading the strided view k once.

    beta: None or [N, B, H, C, 1]; w: None, [N, B, H, C, 1] or [N, B, H, C, K]. The contiguous
    factor comes first, so the product takes its layout.
    """
    if beta is None and w is None:
        return k.contiguous()
    factor = beta if w is None else w if beta is None else beta * w
    return factor * k


def _chunks_forward(q, k, v, beta, la, S0, scale, in_place=False, factorize: bool | None = None):
    """Outputs [N, B, H, C, V] and final state [B, H, K, V] from chunked inputs (``chunking.py``).

    q, k: [N, B, H, C, K] strided views (read once by the first product that uses them); v:
    [N, B, H, C, V]; beta: None or [N, B, H, C, 1]; la: None, [N, B, H, C] or [N, B, H, C, K], the
    log decay per token; S0: [B, H, K, V]. β scales k: β_t k_t v_tᵀ = (β_t k_t) v_tᵀ. in_place:
    no autograd, so fresh intermediates are overwritten (``inplace.py``). factorize: None chooses the
    intra-chunk path from the decay's size (``_factorizable``); False always takes the explicit one
    (the compiled form: no data-dependent branch in the graph).
    """
    bk = functools.partial(_weighted_keys, k, beta)
    if la is None:
        q, k = q.contiguous(), bk(None)
        U = _bmm(k.transpose(-1, -2), v)  # (N, B, H, K, V): U_n = K_nᵀ V_n (eq. A.6)
        states, S = _carry_states(S0, U, None)  # (N, B, H, K, V)
        return _bmm(q, states, alpha=scale, add=_intra_scalar(q, k, v, None, scale), in_place=in_place), S
    per_key = la.dim() == 5
    g = la.cumsum(dim=3)  # (N, B, H, C[, K]): cumulative log decay from the chunk start
    gk = g if per_key else g[..., None]  # (N, B, H, C, K or 1)
    g_end = gk[..., -1:, :]  # (N, B, H, 1, K or 1): decay over the whole chunk
    if factorize is None and _factorizable(g):  # e^{g_i − g_j} = e^{g_i} · e^{−g_j}, all factors well inside the range
        q_g = gk.exp() * q  # (N, B, H, C, K): queries decayed from the chunk start
        A = _bmm(q_g, bk((-gk).exp()).transpose(-1, -2), alpha=scale)  # (N, B, H, C, C)
        intra = _bmm(_causal(A, in_place), v)
        U = _bmm(bk((g_end - gk).exp()).transpose(-1, -2), v)  # (N, B, H, K, V)
    else:  # explicit: every exponent a direct partial sum of log α, ≤ 0
        q = q.contiguous()
        q_g, kc = q * gk.exp(), bk(None)
        if per_key:
            intra = _intra_per_key(q, kc, v, la, scale)
            e_suffix = _suffix_sum(la, dim=-2).exp()  # (N, B, H, C, K): e^{Σ_{s>j} log α_s}
        else:
            d = segment_sums(la)  # (N, B, H, C, C): Σ_{j<s≤i} log α_s, 0 above the diagonal
            d = d.exp_() if in_place else d.exp()  # 1 above the diagonal (in place on the island's output: a copy
            # when compiled)
            intra = _intra_scalar(q, kc, v, d, scale, in_place)
            e_suffix = d[..., -1, :, None].clone()  # (N, B, H, C, 1): row C, e^{Σ_{s>j} log α_s}
            del d  # the [C, C] weights are used up: a smaller heap to fault back in on the next call
        U = _bmm((kc * e_suffix).transpose(-1, -2), v)  # (N, B, H, K, V)
        del kc, e_suffix
    states, S = _carry_states(S0, U, g_end.transpose(-1, -2).exp())  # a_n: (N, B, H, K or 1, 1)
    return _bmm(q_g, states, alpha=scale, add=intra, in_place=in_place), S  # (N, B, H, C, V)


def _factorizable(g: torch.Tensor) -> bool:
    """Whether the intra-chunk decay may be split as e^{g_i} e^{−g_j}: every |g| (cumulative
    log decay from its chunk start) ≤ log(max of the dtype) / 4, i.e. 22 in float32, 177 in
    float64, so factors, products and their gradients stay far from overflow and underflow."""
    return bool(g.detach().abs().amax() <= math.log(torch.finfo(g.dtype).max) / 4)


def _group(q, k, v, log_alpha, beta, S, *, C: int, cd: torch.dtype, scale: float, in_place: bool,
           factorize: bool | None):
    """One group of whole chunks (``groups.py``), t tokens: inputs [B, t, H, ·], S [B, H, K, V] ->
    (o [B, N, C, H, V], S); see ``_chunks_forward`` for in_place and factorize."""
    qc, kc = chunks(q, C, copy=False).to(cd), chunks(k, C, copy=False).to(cd)  # views (N, B, H, C, K)
    vc = chunks(v, C).to(cd)  # (N, B, H, C, V)
    bc = None if beta is None else chunks(beta, C).to(cd)[..., None]  # (N, B, H, C, 1)
    la = None if log_alpha is None else floor_log_decay(chunks(log_alpha, C).to(cd))  # (N, B, H, C[, K])
    o, S = _chunks_forward(qc, kc, vc, bc, la, S, scale, in_place, factorize)  # (N, B, H, C, V)
    return o.permute(1, 0, 3, 2, 4), S  # (B, N, C, H, V)


def chunk_hebbian(q, k, v, *, log_alpha=None, beta=None, scale=None,
                  initial_state=None, output_final_state=False, chunk_size=None, compile=False):
    """Chunkwise-parallel hebbian memory (thesis App. A.1 with GLA / SSD decay).

    Same contract and results as ``recurrent_hebbian``; T need not divide chunk_size
    (zero padding: a padded token has k = v = 0 and α = 1, so it changes nothing).
    Per chunk n with cumulative log decay g from the chunk start:
        O_[n] = scale · ((Q ⊙ e^{g}) S_[n] + (Q Kᵀ ⊙ D) V),   S_[n+1] = e^{g_C} S_[n] + (K ⊙ e^{g_C − g})ᵀ V.
    Cost O(T·C·(K + V)) flops in batched matmuls plus a python loop over T / C chunks
    for the state carry; memory O(T·(C + K·V / C)) (no [T, T] tensor). Long sequences run
    in groups of whole chunks (``groups.py``: cache-sized intermediates, same result).
    Numerics: module docstring. A non-finite input at position p never reaches o_{<p}
    (``isolation.py``). compile: every group through torch.compile (``compiled.py``; the explicit
    intra-chunk path always, no in-place intermediates), the same values to rounding.
    Returns o [B, T, H, V] (dtype of v) and S [B, H, K, V] if output_final_state else None.
    """
    cd = check_matrix_inputs("chunk_hebbian", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    B, T, H, K = q.shape
    chunk_size = check_chunk_size("chunk_hebbian", chunk_size, default_chunk_size(K))
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    S0 = q.new_zeros(B, H, K, V, dtype=cd) if initial_state is None else initial_state.to(cd)
    if B == 0:  # an empty batch: empty outputs
        return v.new_empty(B, T, H, V), (S0 if output_final_state else None)
    in_place = not compile and not records_grad(q, k, v, log_alpha, beta, initial_state)
    group = functools.partial(_group, C=chunk_size, cd=cd, scale=scale, in_place=in_place,
                              factorize=False if compile else None)
    o, S = groups.over_groups(group, (q, k, v, log_alpha, beta), S0, groups.group_step(chunk_size),
                              q.new_empty(B, T, H, V, dtype=cd), compile=compile, chunk_size=chunk_size)
    o = o.to(v.dtype)
    if spread_possible(S) and not spread_possible(S0):  # a non-finite input stays out of earlier outputs
        p = first_non_finite(q, k, v, log_alpha, beta)
        o = keep_finite_prefix(o, p, lambda p: chunk_hebbian(
            q[:, :p], k[:, :p], v[:, :p], log_alpha=None if log_alpha is None else log_alpha[:, :p],
            beta=None if beta is None else beta[:, :p], scale=scale, initial_state=initial_state,
            chunk_size=chunk_size, compile=compile)[0])
    return o, (S if output_final_state else None)
