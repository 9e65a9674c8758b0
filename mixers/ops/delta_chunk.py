"""Chunkwise forms of the delta-rule family through the WY/UT representation.

Equations and the public entry points are in ``delta.py``; this file holds the
chunk algebra on validated inputs (compute dtype, defaults filled in).

Derivation (one head, one chunk of C tokens, start state S_[n]). Every member
of the family writes S_t = diag(a_t) S_{t−1} + k_t u_tᵀ with the correction
u_t = β_t (v_t − S̄_tᵀ k_t), where the erase reads S̄_t = diag(a_t) S_{t−1}
(Gated DeltaNet, "erase reads decayed") or S̄_t = S_{t−1} (joint variant).
Let G_t = Σ_{s≤t} log a_s (cumulative from the chunk start, inclusive) and
E_t = G_t (decayed read) or G_{t−1} (joint). Unrolling inside the chunk,

    S_t   = e^{G_t} ⊙ S_[n] + Σ_{s≤t} (e^{G_t − G_s} ⊙ k_s) u_sᵀ
    u_t   = β_t v_t − β_t (e^{E_t} ⊙ k_t)ᵀ S_[n] − Σ_{s<t} β_t k_tᵀ (e^{E_t − G_s} ⊙ k_s) u_s,

so with A_ts = β_t Σ_κ k_tκ k_sκ e^{E_tκ − G_sκ} (s < t, strictly lower) the UT
transform T = (I + A)⁻¹ gives (Yang et al. 2024, "Parallelizing Linear Transformers with
the Delta Rule over Sequence Length", §3.2; ``minimal.chunk_delta_minimal`` in five steps)

    U = T (β ⊙ V),   W = T (β ⊙ e^{E} ⊙ K),   u = U − W S_[n]                 (1)
    O = (Q ⊙ e^{G}) S_[n] + P u,   P_ts = Σ_κ q_tκ k_sκ e^{G_tκ − G_sκ}, s ≤ t   (2)
    S_[n+1] = e^{G_C} ⊙ S_[n] + (e^{G_C − G} ⊙ K)ᵀ u                            (3)

Scalar decay (one a_t per head) makes the pairwise factors one [C, C] matrix
D_ts = e^{g_t − g_s} and A = diag(β) (K Kᵀ ⊙ D) (the erase reads the decayed
state). Work is batched over all chunks of a group (``GROUP_TOKENS`` tokens,
so the [N, BH, C, ·] intermediates stay cache-sized; the result does not depend
on the grouping): K Kᵀ, Q Kᵀ, D, the triangular inverse T (``_unit_lower_inverse``:
16×16 diagonal blocks by torch.linalg.solve_triangular, then block rows by
batched matmuls) and U, W = T R are all-chunk batched matmuls. Only
u = U − W S_[n] and (3) run per chunk (``_Carry``, two small matmuls and a scale,
with a hand-written backward), and (2)'s state term is one batched matmul against
the stacked chunk-start states afterwards. Without autograd (inference, or inputs
that do not require grad) the chunked copies are overwritten in place
(``inplace.py``), the carry keeps the decay folded into W, k and the read, and the
state term of (2) is read inside the loop from one running state (``_carry_read`` with a
``_fold_plan``: three small matmuls per chunk, no scale, no stored states), the same
values to rounding.

Numerics (log_alpha ≤ 0): log α is first raised to the dtype's underflow floor
(``decay.floor_log_decay``: α and its gradient are exactly 0 below it anyway), so
every G is finite, down to α = 0 (log α = −inf). Every exponent evaluated is a
difference G_later − G_earlier ≤ 0, so nothing overflows whatever the decay; a factor
underflows to 0 only when the true weight is below the dtype's tiny. The erase of the
joint variant reads E_t = G_{t−1} exactly (a shift of G, no division by α). Scalar
decay takes its exponents as float64 differences of float64 prefix sums, rounded once
(``decay.segment_sums``), so each is accurate relative to its own size: float32
outputs stay within ~1e-6 relative of float64 for any decay (measured: 3.6e-5 at
log α down to −1e4 and 1.5e-2 at −1e6 when the differences were taken in float32).
Per-key exponents are float32 differences of float32 prefix sums of the floored
log α, |G| ≤ C·105, so their error is bounded by ~C·105·eps (measured ≤ 2e-5 relative
for any decay). Per-key
decay cannot factor A or P as (k e^{E}) (k e^{−G})ᵀ stably (e^{−G} overflows
under strong decay). Instead each chunk is split into sub-chunks of s tokens
(the largest divisor of C that is ≤ 16): diagonal [s, s] blocks get the explicit
[s, s, K] pairwise decays, and an off-diagonal block (rows in sub-chunk j,
columns before it) factorises through the boundary r_j = G at the last token of
sub-chunk j − 1: (x_t e^{E_t − r_j}) · (k_s e^{r_j − G_s}), both exponents ≤ 0.
Memory is O(T·(C/s + s)·K) per head for the pairwise terms; no [T, T] tensor.
The folded carry divides by the decay within a segment of chunks whose decay
stays above e^{−limit} (``_fold_plan``), so its factors stay within e^{±2·limit}.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import groups
from .chunking import chunks
from .contract import autocast_off
from .decay import floor_log_decay, segment_sums
from .inplace import records_grad, scaled

__all__ = ["DeltaInputs", "chunk_scalar_decay", "chunk_key_decay", "chunk_low_rank", "default_chunk_size"]

_BASE_BLOCK = 16  # triangular inverse: diagonal blocks inverted by torch.linalg.solve_triangular
# tokens per group of chunks (groups.py); the [N, BH, C, C] and C³ terms here are smaller per token than
# the hebbian form's, and 2048 measured fastest at T = 2048 and 8192 (K = 64, C = 32; 1024: 5-25 % slower)
GROUP_TOKENS = 2048
_SUB_CHUNK = 16  # per-key decay: largest sub-chunk (a divisor of chunk_size) with explicit [s, s, K] decays


class DeltaInputs(NamedTuple):
    """Validated inputs of a delta-rule op (``delta.py``) in the compute dtype, defaults filled in."""
    q: torch.Tensor                 # [B, T, H, K]
    k: torch.Tensor                 # [B, T, H, K]
    v: torch.Tensor                 # [B, T, H, V]
    log_alpha: torch.Tensor | None  # None, [B, T, H] or [B, T, H, K]
    beta: torch.Tensor              # [B, T, H]
    state: torch.Tensor             # [B, H, K, V]
    scale: float                    # read-out scale (K**-0.5 by default)


def default_chunk_size(K: int) -> int:
    """C when the caller passes chunk_size=None: min(64, max(16, K // 2)).

    Measured on 2-core CPUs (B=1, H=4, T=2048 and 8192, fp32, Gated DeltaNet): at K=64,
    C=32 is 2-15 % faster than C=64 forward (depending on the machine) and about as fast
    forward+backward (the sequential carry's [C, K] x [K, V] products stay cheap while the C²
    and C³ terms shrink); at K=128, C=64 is faster than 32. The result does not depend on C
    (to rounding).
    """
    return min(64, max(16, K // 2))


def _group_out(o: torch.Tensor, B: int) -> torch.Tensor:
    """o [N, B*H, C, V] -> [B, N, C, H, V] (a view; ``groups.over_groups`` drops the padding)."""
    N, BH, C, V = o.shape
    return o.view(N, B, BH // B, C, V).permute(1, 0, 3, 2, 4)


def _diag_block_inverses(A: torch.Tensor, b: int) -> torch.Tensor:
    """Inverses of the b×b diagonal blocks of I + strictly_lower(A) [..., n*b, n*b] -> [..., n, b, b]."""
    *lead, C, _ = A.shape
    n = C // b
    blocks = torch.diagonal(A.view(*lead, n, b, n, b), dim1=-4, dim2=-2).movedim(-1, -3)  # (..., n, b, b)
    eye = torch.eye(b, dtype=A.dtype, device=A.device)
    return torch.linalg.solve_triangular(blocks, eye.expand_as(blocks), upper=False, unitriangular=True)


def _unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """T = (I + strictly_lower(A))⁻¹ for A [..., C, C] (no autograd), by blocks of b = min(16, C) rows.

    1. The b×b diagonal blocks T_II are inverted with torch.linalg.solve_triangular, all at once.
    2. Block rows, left-looking: T_{I,<I} = −T_II (L_{I,<I} T_{<I,<I}) (two batched matmuls each).
    C is padded to a multiple of b with zero rows (the padded system is block diagonal).
    """
    C = A.shape[-1]
    b = min(_BASE_BLOCK, C)
    pad = -C % b
    if pad:
        A = F.pad(A, (0, pad, 0, pad))  # (..., n*b, n*b)
    Tb = _diag_block_inverses(A, b)  # (..., n, b, b)
    T = torch.empty_like(A)  # every entry written below: the upper block triangle is set to 0
    for I in range(Tb.shape[-3]):
        rows, left = slice(I * b, (I + 1) * b), slice(0, I * b)
        if I:
            T[..., rows, left] = -(Tb[..., I, :, :] @ (A[..., rows, left] @ T[..., left, left]))
        T[..., rows, rows] = Tb[..., I, :, :]
        T[..., rows, (I + 1) * b:] = 0
    return T[..., :C, :C]


class _UnitLowerSolve(torch.autograd.Function):
    """[X₁, X₂] = (I + strictly_lower(A))⁻¹ [R₁, R₂] (the UT transform, eq. 1), for all chunks at once.

    Forward: T = ``_unit_lower_inverse(A)``, Xᵢ = T Rᵢ (batched matmuls). Backward:
    dRᵢ = Tᵀ dXᵢ and dA = −strictly_lower(Σᵢ dRᵢ Xᵢᵀ) (from dX = −T dA X).
    A: [N, BH, C, C] (diagonal and upper triangle ignored); Rᵢ: [N, BH, C, Mᵢ].
    """

    @staticmethod
    def forward(ctx, A, R1, R2):
        T = _unit_lower_inverse(A)  # (N, BH, C, C)
        X1, X2 = T @ R1, T @ R2  # (N, BH, C, M₁), (N, BH, C, M₂)
        ctx.save_for_backward(T, X1, X2)
        return X1, X2

    @staticmethod
    @torch.autograd.function.once_differentiable
    @autocast_off
    def backward(ctx, dX1, dX2):
        T, X1, X2 = ctx.saved_tensors
        dR1, dR2 = T.mT @ dX1, T.mT @ dX2  # (N, BH, C, M₁), (N, BH, C, M₂)
        dA = (dR1 @ X1.mT).flatten(0, 1).baddbmm_(dR2.flatten(0, 1), X2.flatten(0, 1).mT)  # (N*BH, C, C)
        return dA.view(T.shape).tril(-1).neg_(), dR1, dR2


class _FoldPlan(NamedTuple):
    """How ``_carry_read`` applies the per-chunk decay (see there). d_in, d_out: [N, BH]."""
    d_in: torch.Tensor      # log D at each chunk's start, relative to its segment's start (≤ 0)
    d_out: torch.Tensor     # log D after the chunk (d_in + c_n), 0 for explicit chunks
    explicit: list[bool]    # chunk decays its state with a multiply (its own decay is below −limit)
    rescale: list[bool]     # multiply the state after the chunk by e^{d_out}: a segment ends there


def _fold_plan(c: torch.Tensor) -> _FoldPlan:
    """Split the chunks into segments over which the decay can be folded, from c [N, BH], the
    log decay of each chunk (limit = log(dtype max) / 4: 22 in float32, 177 in float64).

    1. A chunk whose strongest decay (over heads) is below −limit is explicit: a segment of
       its own, decayed by a multiply.
    2. Other chunks join the current segment while the sum of their strongest decays stays
       ≥ −limit; that sum bounds every head's own log decay over the segment from below, so
       each head's factors stay within e^{±2·limit}.
    3. Each head's log decay since its segment's start, from float64 prefix sums over the chunks.
    """
    limit = math.log(torch.finfo(c.dtype).max) / 4
    N = c.shape[0]
    worst = c.amin(1).tolist()  # (N,) the strongest decay of each chunk over the heads
    explicit = [w < -limit for w in worst]
    first, rescale = [0] * N, [False] * N  # the first chunk of each chunk's segment; segment ends
    cur = 0.0
    for n, w in enumerate(worst):
        if explicit[n] or n == 0 or explicit[n - 1] or cur + w < -limit:  # a new segment starts at n
            first[n], cur = n, 0.0
            if n:
                rescale[n - 1] = not explicit[n - 1]
        else:
            first[n] = first[n - 1]
        cur += w
    rescale[N - 1] = not explicit[N - 1]
    # prefix sums from the group's start to each chunk's start (index n) and end (n + 1); a chunk's
    # values depend on the chunks up to it only, so outputs stay causal bit for bit
    sums = F.pad(c.to(torch.float64).cumsum(0), (0, 0, 1, 0))  # (N + 1, BH)
    before = sums[torch.tensor(first, device=c.device)]  # (N, BH): ... to the segment's start
    keep = torch.tensor([not e for e in explicit], dtype=sums.dtype, device=c.device)[:, None]
    d_in, d_out = (sums[:-1] - before) * keep, (sums[1:] - before) * keep  # (N, BH)
    return _FoldPlan(d_in.to(c.dtype), d_out.to(c.dtype), explicit, rescale)


def _carry(u, W, k, a, S0):
    """The forward loop of ``_Carry`` on plain tensors: overwrites u (holding U) with u = U − W S.

    a: None (no decay) or [N, BH, 1 or K, 1]. Each chunk steps as u_n = U_n − W_n S_n,
    S_{n+1} = a_n S_n + k_nᵀ u_n (per-chunk views from one ``unbind`` each).
    Returns the states [N + 1, BH, K, V] (chunk starts, then S_N) and u.
    """
    N = u.shape[0]
    Z = S0.new_empty(N + 1, *S0.shape)  # (N+1, BH, K, V)
    Z[0] = S0
    Zs, us, Ws, ks = Z.unbind(0), u.unbind(0), W.unbind(0), k.mT.unbind(0)
    as_ = (None,) * N if a is None else a.unbind(0)
    for n in range(N):
        us[n].baddbmm_(Ws[n], Zs[n], alpha=-1)  # u_n = U_n − W_n S_n
        if as_[n] is None:
            torch.baddbmm(Zs[n], ks[n], us[n], out=Zs[n + 1])
        else:
            torch.mul(Zs[n], as_[n], out=Zs[n + 1])
            Zs[n + 1].baddbmm_(ks[n], us[n])  # S_{n+1} = a_n S_n + k_nᵀ u_n
    return Z, u


def _carry_read(u, W, k, q, P, a, S0, plan: _FoldPlan | None = None):
    """The carry and the read (eqs. 1-3) without autograd: one running state, no stored states.

    u (holding U; overwritten with u), W, k: as in ``_Carry``; q: [N, BH, C, K] the read's
    scale e^{g} ⊙ Q; P: [N, BH, C, C] the causal intra-chunk weights; a: None or [N, BH, 1, 1].
    Per chunk: u_n = U_n − W_n S_n, the state read o_n = q_n S_n, then S_{n+1} = a_n S_n + k_nᵀ u_n
    (three small products; the intra-chunk read P u is batched afterwards).

    With a plan (``_fold_plan``) the state is kept as Z_n = S_n / D_n, D_n the decay since the
    start of the chunk's segment; the caller has folded D_n into W_n and q_n, and 1 / D_{n+1}
    into k_n, so a chunk in a segment steps as u_n = U_n − W_n Z_n, Z_{n+1} = Z_n + k_nᵀ u_n
    (no multiply); Z is multiplied by D at a segment's end (back to S), explicit chunks step
    as above. Returns o [N, BH, C, V] and the final state [BH, K, V].
    """
    N = u.shape[0]
    Z = S0.clone(memory_format=torch.contiguous_format)  # (BH, K, V), the caller's state is kept
    o = torch.empty_like(u)  # (N, BH, C, V)
    us, Ws, ks, qs, os_ = u.unbind(0), W.unbind(0), k.mT.unbind(0), q.unbind(0), o.unbind(0)
    as_ = (None,) * N if a is None else a.unbind(0)
    explicit = [x is not None for x in as_] if plan is None else plan.explicit
    D_end = None if plan is None else plan.d_out.exp()[..., None, None].unbind(0)  # (BH, 1, 1) each
    for n in range(N):
        us[n].baddbmm_(Ws[n], Z, alpha=-1)  # u_n = U_n − W_n Z_n
        torch.bmm(qs[n], Z, out=os_[n])  # the state read q_n Z_n (eq. 2)
        if explicit[n]:
            Z.mul_(as_[n])
        Z.baddbmm_(ks[n], us[n])  # Z_{n+1} = (a_n) Z_n + k_nᵀ u_n
        if plan is not None and plan.rescale[n]:
            Z.mul_(D_end[n])
    o.flatten(0, 1).baddbmm_(P.flatten(0, 1), u.flatten(0, 1))  # + P u (eq. 2)
    return o, Z


class _Carry(torch.autograd.Function):
    """Sequential part over chunks n = 0 … N−1 (eqs. 1, 3), with a hand-written backward:

        u_n = U_n − W_n S_[n],    S_[n+1] = a_n ⊙ S_[n] + k_nᵀ u_n.

    U: [N, BH, C, V]; W, k (= e^{G_C − G} ⊙ K): [N, BH, C, K]; a: None, [N, BH, 1, 1] or [N, BH, K, 1];
    S0: [BH, K, V]. Returns the chunk-start states [N, BH, K, V], u [N, BH, C, V] and S_[N] [BH, K, V].
    Only the recurrence runs per chunk (two small matmuls); the weight gradients are batched afterwards.
    """

    @staticmethod
    def forward(ctx, U, W, k, a, S0):
        starts, u = _carry(U.clone(memory_format=torch.contiguous_format), W, k, a, S0)
        ctx.save_for_backward(W, k, a, starts, u)
        N = u.shape[0]
        return starts[:N], u, starts[N]

    @staticmethod
    @torch.autograd.function.once_differentiable
    @autocast_off
    def backward(ctx, d_starts, d_u, d_final):
        W, k, a, starts, u = ctx.saved_tensors
        N = u.shape[0]
        dS = torch.empty_like(starts)  # dS[n] = ∂L/∂S_n, n = 0 … N
        dS[:N], dS[N] = d_starts, d_final
        du = d_u.clone(memory_format=torch.contiguous_format)  # total ∂L/∂u_n (through the output and the state)
        dSs, dus, Ws, ks = dS.unbind(0), du.unbind(0), W.mT.unbind(0), k.unbind(0)  # per-chunk views
        as_ = (None,) * N if a is None else a.unbind(0)
        for n in reversed(range(N)):
            dus[n].baddbmm_(ks[n], dSs[n + 1])  # du_n += k_n dS_{n+1}
            if as_[n] is None:
                dSs[n].add_(dSs[n + 1])
            else:
                dSs[n].addcmul_(dSs[n + 1], as_[n])
            dSs[n].baddbmm_(Ws[n], dus[n], alpha=-1)  # dS_n = a_n dS_{n+1} + ∂o/∂S_n − W_nᵀ du_n
        S, dS_next = starts[:N], dS[1:]  # (N, BH, K, V): S_n and ∂L/∂S_{n+1}
        dW = (du @ S.mT).neg_()  # (N, BH, C, K)
        dk = u @ dS_next.mT  # (N, BH, C, K)
        da = None
        if a is not None:
            da = (S * dS_next).sum(-1, keepdim=True)  # (N, BH, K, 1)
            da = da if a.shape[-2] > 1 else da.sum(-2, keepdim=True)  # (N, BH, 1, 1) for a scalar decay
        return du, dW, dk, da, dS[0]


def _over_groups(group_fn, x: DeltaInputs, C: int):
    """Run ``group_fn`` over groups of whole chunks (``groups.over_groups``), carrying S [BH, K, V].

    Returns o [B, T, H, V] and the final state [B, H, K, V].
    """
    B, T, H, K = x.q.shape
    step = groups.group_step(C, GROUP_TOKENS)
    fn = lambda q_g, k_g, v_g, la_g, beta_g, S: group_fn(q_g, k_g, v_g, la_g, beta_g, S, x.scale, C)  # noqa: E731
    out = x.v.new_empty(B, T, H, x.v.shape[-1])
    o, S = groups.over_groups(fn, (x.q, x.k, x.v, x.log_alpha, x.beta), x.state.reshape(B * H, K, -1), step, out)
    return o, S.reshape(B, H, K, -1)


def chunk_scalar_decay(x: DeltaInputs, C: int, *, erase_reads_decayed: bool = True):
    """Delta rule with scalar (or no) decay, chunkwise (eqs. 1-3): S_t = α_t S_{t−1} + k_t u_tᵀ.

    erase_reads_decayed=True: Gated DeltaNet, u_t = β_t (v_t − (α_t S_{t−1})ᵀ k_t), i.e.
    S_t = α_t (I − β_t k kᵀ) S_{t−1} + β_t k vᵀ. False: the joint variant, u_t = β_t (v_t − S_{t−1}ᵀ k_t),
    i.e. S_t = (α_t I − β_t k kᵀ) S_{t−1} + β_t k vᵀ.
    x: q, k [B, T, H, K]; v [B, T, H, V]; log_alpha None or [B, T, H]; beta [B, T, H]; state
    [B, H, K, V]; o_t = S_tᵀ (scale · q_t). Returns o [B, T, H, V] and the final state [B, H, K, V].
    log_alpha is raised to the dtype's underflow floor (``decay.floor_log_decay``: same α, finite
    exponents). When no gradient is recorded the chunked copies are overwritten in place (same values).
    """
    in_place = not records_grad(x.q, x.k, x.v, x.log_alpha, x.beta, x.state)
    group = functools.partial(_scalar_decay_group, in_place=in_place, erase_reads_decayed=erase_reads_decayed)
    return _over_groups(group, x._replace(log_alpha=floor_log_decay(x.log_alpha)), C)


def _erase_decay(A: torch.Tensor, D: torch.Tensor, in_place: bool, erase_reads_decayed: bool) -> torch.Tensor:
    """A ⊙ the erase's pairwise decay, A and D: [N, BH, C, C] (only the strictly lower part of A is used).

    Gated DeltaNet: A_ts e^{g_t − g_s} = A ⊙ D. Joint: A_ts e^{g_{t−1} − g_s}, i.e. row t of A times row
    t − 1 of D (row 0 has no strictly lower entry and is left as it is).
    """
    if erase_reads_decayed:
        return scaled(A, D, in_place)
    if in_place:
        A[..., 1:, :].mul_(D[..., :-1, :])
        return A
    return torch.cat([A[..., :1, :], A[..., 1:, :] * D[..., :-1, :]], dim=-2)


def _scalar_decay_group(q, k, v, log_alpha, beta, S, scale: float, C: int, *, in_place: bool = False,
                        erase_reads_decayed: bool = True):
    """``chunk_scalar_decay`` on one group of tokens; S: [BH, K, V]. Returns o [B, N, C, H, V] and S.

    in_place: overwrite the chunked copies and intermediates (forward without autograd).
    """
    B = q.shape[0]
    q, k, v = (chunks(x, C).flatten(1, 2) for x in (q, k, v))  # (N, BH, C, K|V), fresh copies
    beta = chunks(beta, C).flatten(1, 2)[..., None]  # (N, BH, C, 1)
    q = scaled(q, scale, in_place)  # scale · Q: both read terms (P and the state read) carry it
    k_beta = k * beta  # (N, BH, C, K)
    A = k_beta @ k.mT  # (N, BH, C, C): β_t k_tᵀ k_s
    P = q @ k.mT  # (N, BH, C, C): scale · q_tᵀ k_s
    a, plan = None, None  # per-chunk state decay e^{g_C}; the folded carry's plan
    if log_alpha is not None:
        la = chunks(log_alpha, C).flatten(1, 2)  # (N, BH, C)
        g = la.to(torch.float64).cumsum(-1)[..., None]  # (N, BH, C, 1) log decay since the chunk start, float64
        # D_ts = e^{g_t − g_s} for s ≤ t, each exponent a float64 difference rounded once (decay.py), so it is
        # accurate relative to its own size whatever decay came before; 1 above the diagonal: the solve reads
        # only the strictly lower part of A, and P is made causal by tril_
        D = segment_sums(la).exp_()  # (N, BH, C, C)
        A = _erase_decay(A, D, in_place, erase_reads_decayed)  # A = diag(β) (K Kᵀ ⊙ D) (joint: D shifted a row)
        P = scaled(P, D, in_place)  # P = (Q Kᵀ) ⊙ D
        del D  # every [N, BH, ·, ·] intermediate is dropped as soon as it is used up (a smaller heap to fault in)
        g_end = g[..., -1:, :]  # (N, BH, 1, 1) log decay of the whole chunk
        a = g_end.exp().to(q.dtype)  # (N, BH, 1, 1)
        # without autograd the carry keeps S / D (``_carry_read`` with a plan): D_n in e^{g}, 1 / D_{n+1} in e^{g_C − g}
        plan = _fold_plan(g_end[:, :, 0, 0].to(q.dtype)) if in_place else None
        d_in, d_out = (0.0, 0.0) if plan is None else (plan.d_in[..., None, None], plan.d_out[..., None, None])
        E = g if erase_reads_decayed else F.pad(g[..., :-1, :], (0, 0, 1, 0))  # decay the erase sees: g_t or g_{t−1}
        k_beta = scaled(k_beta, (E + d_in).exp().to(q.dtype), in_place)  # β e^{E} ⊙ K
        q = scaled(q, (g + d_in).exp().to(q.dtype), in_place)  # scale e^{g} ⊙ Q: the state read
        k = scaled(k, (g_end - g - d_out).exp().to(q.dtype), in_place)  # e^{g_C − g} ⊙ K: the state write
    P = P.tril_() if in_place else P.tril()  # causal (in place on a view would record CopySlices)
    # 1. UT transform, all chunks at once: [U | W] = T [β ⊙ V | β e^{E} ⊙ K]
    U, W = _UnitLowerSolve.apply(A, scaled(v, beta, in_place), k_beta)  # (N, BH, C, V), (N, BH, C, K)
    del A, v, k_beta
    # 2. sequential over chunks: u = U − W S_[n], the state carry (eq. 3) and 3. the read (eq. 2)
    if in_place:
        o, S = _carry_read(U, W, k, q, P, a, S, plan)  # (N, BH, C, V), u overwrites U
    else:
        starts, u, S = _Carry.apply(U, W, k, a, S)
        o = torch.baddbmm((P @ u).flatten(0, 1), q.flatten(0, 1), starts.flatten(0, 1)).view(u.shape)  # (N, BH, C, V)
    return _group_out(o, B), S


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


def chunk_key_decay(x: DeltaInputs, C: int, *, erase_reads_decayed: bool):
    """Delta rule with per-key decay S_t = diag(a_t) S_{t−1} + k_t u_tᵀ, chunkwise (eqs. 1-3).

    erase_reads_decayed=False: the joint variant, u_t = β_t (v_t − S_{t−1}ᵀ k_t), i.e.
    S_t = (diag(a_t) − β_t k kᵀ) S_{t−1} + β_t k vᵀ. True: u_t = β_t (v_t − (diag(a_t) S_{t−1})ᵀ k_t).
    x: q, k, log_alpha [B, T, H, K]; v [B, T, H, V]; beta [B, T, H]; state [B, H, K, V].
    Returns o [B, T, H, V] and the final state [B, H, K, V].
    """
    group = functools.partial(_key_decay_group, erase_reads_decayed=erase_reads_decayed)
    return _over_groups(group, x._replace(log_alpha=floor_log_decay(x.log_alpha)), C)


def _key_decay_group(q, k, v, log_alpha, beta, S, scale: float, C: int, *, erase_reads_decayed: bool):
    """``chunk_key_decay`` on one group of tokens; S: [BH, K, V]. Returns o [B, N, C, H, V] and S."""
    B = q.shape[0]
    q, k, v, la = (chunks(x, C).flatten(1, 2) for x in (q * scale, k, v, log_alpha))  # (N, BH, C, K|V)
    beta = chunks(beta, C).flatten(1, 2)[..., None]  # (N, BH, C, 1)
    G = la.cumsum(-2)  # (N, BH, C, K) inclusive log decay since the chunk start
    E = G if erase_reads_decayed else F.pad(G[..., :-1, :], (0, 0, 1, 0))  # (N, BH, C, K) decay the erase sees:
    # G_t, or exactly G_{t−1} (a shift, not G − la, which would cancel under strong decay)
    s = _sub_chunk(C)
    # 1. UT transform: A_ts = β_t Σ k_t k_s e^{E_t − G_s} (s < t), erase keys e^{E} ⊙ K
    A = _pairwise(k, E, k, G, s, strict=True) * beta  # (N, BH, C, C)
    U, W = _UnitLowerSolve.apply(A, v * beta, k * (beta * E.exp()))  # (N, BH, C, V), (N, BH, C, K)
    # 2. intra-chunk read weights P_ts = Σ q_t k_s e^{G_t − G_s} (s ≤ t)
    P = _pairwise(q, G, k, G, s, strict=False)  # (N, BH, C, C)
    # 3. sequential over chunks
    q_in = q * G.exp()  # (N, BH, C, K)
    k_out = k * (G[..., -1:, :] - G).exp()  # (N, BH, C, K)
    a = G[..., -1, :].exp()[..., None]  # (N, BH, K, 1)
    starts, u, S = _Carry.apply(U, W, k_out, a, S)
    # 4. read (eq. 2)
    o = q_in @ starts + P @ u  # (N, BH, C, V)
    return _group_out(o, B), S


def chunk_low_rank(q, k, v, log_alpha, beta, kappa, state, scale: float, C: int):
    """Diagonal plus low rank (RWKV-7) chunkwise: S_t = diag(a_t) S_{t−1} + x_t v_tᵀ + y_t e_tᵀ with the
    write x_t = β_t ⊙ k_t, the erase y_t = β_t ⊙ κ_t and its values e_t = −S_{t−1}ᵀ κ_t.

    Unrolled in a chunk (E_t = G_{t−1}, the erase reads S_{t−1}):
        (I + A_yy) e = −A_yx V − (e^{E} ⊙ κ) S_[n],  A_yz,ts = Σ κ_t z_s e^{E_t − G_s} (s < t)   (1')
    so e = U_e − W_e S_[n] by the UT transform, and the 2C writes [x; y] of the values [v; e] are
    carried (eq. 3) and read (eq. 2) as one chunk of twice the length.
    q, k, log_alpha, beta, kappa: [B, T, H, K]; v: [B, T, H, V]; state: [B, H, K, V].
    """
    B, T, H, K = q.shape
    fn = lambda q_g, k_g, v_g, la_g, b_g, kap_g, S: _low_rank_group(  # noqa: E731
        q_g, k_g, v_g, la_g, b_g, kap_g, S, scale, C)
    out = v.new_empty(B, T, H, v.shape[-1])
    o, S = groups.over_groups(fn, (q, k, v, floor_log_decay(log_alpha), beta, kappa), state.reshape(B * H, K, -1),
                              groups.group_step(C, GROUP_TOKENS), out)
    return o, S.reshape(B, H, K, -1)


def _low_rank_group(q, k, v, log_alpha, beta, kappa, S, scale: float, C: int):
    """``chunk_low_rank`` on one group of tokens; S: [BH, K, V]. Returns o [B, N, C, H, V] and S."""
    B = q.shape[0]
    q, k, v, la, beta, kappa = (chunks(x, C).flatten(1, 2)  # (N, BH, C, ·)
                                for x in (q * scale, k, v, log_alpha, beta, kappa))
    x, y = beta * k, beta * kappa  # (N, BH, C, K) the write and erase vectors
    G = la.cumsum(-2)  # (N, BH, C, K) inclusive log decay since the chunk start
    E = F.pad(G[..., :-1, :], (0, 0, 1, 0))  # the erase reads S_{t−1}: exactly G_{t−1} (a shift, not G − la)
    s = _sub_chunk(C)
    # 1. the erase values e = U_e − W_e S_[n] (eq. 1')
    A_yy, A_yx = _pairwise(kappa, E, y, G, s, strict=True), _pairwise(kappa, E, x, G, s, strict=True)
    U_e, W_e = _UnitLowerSolve.apply(A_yy, -(A_yx @ v), kappa * E.exp())  # (N, BH, C, V), (N, BH, C, K)
    # 2. carry the 2C writes [x; y] with values [v; e] over the chunks (eq. 3)
    out_decay = (G[..., -1:, :] - G).exp()  # (N, BH, C, K)
    U = torch.cat((v, U_e), dim=-2)  # (N, BH, 2C, V)
    W = torch.cat((torch.zeros_like(W_e), W_e), dim=-2)  # (N, BH, 2C, K)
    starts, u, S = _Carry.apply(U, W, torch.cat((x * out_decay, y * out_decay), dim=-2), G[..., -1, :].exp()[..., None], S)
    # 3. read (eq. 2): the chunk-start state and the writes up to t
    P = torch.cat((_pairwise(q, G, x, G, s, strict=False), _pairwise(q, G, y, G, s, strict=False)), dim=-1)
    o = (q * G.exp()) @ starts + P @ u  # (N, BH, C, V)
    return _group_out(o, B), S
