"""The two autograd Functions of the delta-rule chunk forms (``delta_chunk.py``), and the no-grad carry.

    UnitLowerSolve   [X₁, X₂] = (I + strictly_lower(A))⁻¹ [R₁, R₂]: the UT transform (eq. 1 of
                     ``delta_chunk.py``), all chunks at once, by a blocked triangular inverse
    Carry            the sequential part over chunks (eqs. 1, 3): u_n = U_n − W_n S_[n],
                     S_[n+1] = a_n ⊙ S_[n] + k_nᵀ u_n, with a hand-written reverse loop
    carry_read       the carry and the state read without autograd (one running state), with a
                     ``fold_plan`` that keeps the decay folded into W, k and the read

The two Functions and ``carry_read`` run eagerly also inside a compiled chunk form
(``compiled.island``): their loops write per-chunk slices of one buffer in place, which a traced
graph would turn into copies of the whole buffer per chunk (``compiled.py``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .contract import autocast_off

__all__ = ["UnitLowerSolve", "Carry", "FoldPlan", "fold_plan", "carry_read", "unit_lower_inverse"]

_BASE_BLOCK = 16  # triangular inverse: diagonal blocks inverted by torch.linalg.solve_triangular


def diag_block_inverses(A: torch.Tensor, b: int) -> torch.Tensor:
    """Inverses of the b×b diagonal blocks of I + strictly_lower(A) [..., n*b, n*b] -> [..., n, b, b]."""
    *lead, C, _ = A.shape
    n = C // b
    blocks = torch.diagonal(A.view(*lead, n, b, n, b), dim1=-4, dim2=-2).movedim(-1, -3)  # (..., n, b, b)
    eye = torch.eye(b, dtype=A.dtype, device=A.device)
    return torch.linalg.solve_triangular(blocks, eye.expand_as(blocks), upper=False, unitriangular=True)


def unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
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
    Tb = diag_block_inverses(A, b)  # (..., n, b, b)
    T = torch.empty_like(A)  # every entry written below: the upper block triangle is set to 0
    for I in range(Tb.shape[-3]):
        rows, left = slice(I * b, (I + 1) * b), slice(0, I * b)
        if I:
            T[..., rows, left] = -(Tb[..., I, :, :] @ (A[..., rows, left] @ T[..., left, left]))
        T[..., rows, rows] = Tb[..., I, :, :]
        T[..., rows, (I + 1) * b:] = 0
    return T[..., :C, :C]


class UnitLowerSolve(torch.autograd.Function):
    """[X₁, X₂] = (I + strictly_lower(A))⁻¹ [R₁, R₂] (the UT transform, eq. 1), for all chunks at once.

    Forward: T = ``unit_lower_inverse(A)``, Xᵢ = T Rᵢ (batched matmuls). Backward:
    dRᵢ = Tᵀ dXᵢ and dA = −strictly_lower(Σᵢ dRᵢ Xᵢᵀ) (from dX = −T dA X).
    A: [N, BH, C, C] (diagonal and upper triangle ignored); Rᵢ: [N, BH, C, Mᵢ].
    """

    @staticmethod
    def forward(ctx, A, R1, R2):
        T = unit_lower_inverse(A)  # (N, BH, C, C)
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


class FoldPlan(NamedTuple):
    """How ``carry_read`` applies the per-chunk decay (see there). d_in, d_out: [N, BH]."""
    d_in: torch.Tensor      # log D at each chunk's start, relative to its segment's start (≤ 0)
    d_out: torch.Tensor     # log D after the chunk (d_in + c_n), 0 for explicit chunks
    explicit: list[bool]    # chunk decays its state with a multiply (its own decay is below −limit)
    rescale: list[bool]     # multiply the state after the chunk by e^{d_out}: a segment ends there


def fold_plan(c: torch.Tensor) -> FoldPlan:
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
    return FoldPlan(d_in.to(c.dtype), d_out.to(c.dtype), explicit, rescale)


def carry_loop(u, W, k, a, S0):
    """The forward loop of ``Carry`` on plain tensors: overwrites u (holding U) with u = U − W S.

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


def carry_read(u, W, k, q, P, a, S0, plan: FoldPlan | None = None):
    """The carry and the read (eqs. 1-3) without autograd: one running state, no stored states.

    u (holding U; overwritten with u), W, k: as in ``Carry``; q: [N, BH, C, K] the read's
    scale e^{g} ⊙ Q; P: [N, BH, C, C] the causal intra-chunk weights; a: None or [N, BH, 1, 1].
    Per chunk: u_n = U_n − W_n S_n, the state read o_n = q_n S_n, then S_{n+1} = a_n S_n + k_nᵀ u_n
    (three small products; the intra-chunk read P u is batched afterwards).

    With a plan (``fold_plan``) the state is kept as Z_n = S_n / D_n, D_n the decay since the
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


class Carry(torch.autograd.Function):
    """Sequential part over chunks n = 0 … N−1 (eqs. 1, 3), with a hand-written backward:

        u_n = U_n − W_n S_[n],    S_[n+1] = a_n ⊙ S_[n] + k_nᵀ u_n.

    U: [N, BH, C, V]; W, k (= e^{G_C − G} ⊙ K): [N, BH, C, K]; a: None, [N, BH, 1, 1] or [N, BH, K, 1];
    S0: [BH, K, V]. Returns the chunk-start states [N, BH, K, V], u [N, BH, C, V] and S_[N] [BH, K, V].
    Only the recurrence runs per chunk (two small matmuls); the weight gradients are batched afterwards.
    """

    @staticmethod
    def forward(ctx, U, W, k, a, S0):
        starts, u = carry_loop(U.clone(memory_format=torch.contiguous_format), W, k, a, S0)
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
