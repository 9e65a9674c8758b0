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
on the grouping): K Kᵀ, Q Kᵀ, D, the triangular inverse T (``unit_lower_inverse``:
16×16 diagonal blocks by torch.linalg.solve_triangular, then block rows by
batched matmuls) and U, W = T R are all-chunk batched matmuls. Only
u = U − W S_[n] and (3) run per chunk (``Carry``, two small matmuls and a scale,
with a hand-written backward), and (2)'s state term is one batched matmul against
the stacked chunk-start states afterwards. Without autograd (inference, or inputs
that do not require grad) the chunked copies are overwritten in place
(``inplace.py``), the carry keeps the decay folded into W, k and the read, and the
state term of (2) is read inside the loop from one running state (``carry_read`` with a
``fold_plan``: three small matmuls per chunk, no scale, no stored states), the same
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
stays above e^{−limit} (``fold_plan``), so its factors stay within e^{±2·limit}.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import groups
from .chunking import chunks
from .compiled import island
from .decay import floor_log_decay, segment_sums
from .delta_carry import Carry, UnitLowerSolve, carry_read, fold_plan
from .inplace import records_grad, scaled

__all__ = ["DeltaInputs", "chunk_scalar_decay", "chunk_key_decay", "chunk_low_rank", "default_chunk_size"]

# tokens per group of chunks (groups.py); the [N, BH, C, C] and C³ terms here are smaller per token than
# the hebbian form's, and 2048 measured fastest at T = 2048 and 8192 (K = 64, C = 32; 1024: 5-25 % slower)
GROUP_TOKENS = 2048
# the autograd Functions and the no-grad carry run eagerly inside a compiled form (compiled.py: their in-place
# loops would be traced as copies)
_solve, _carry, _carry_read = island(UnitLowerSolve.apply), island(Carry.apply), island(carry_read)
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


def _over_groups(group_fn, x: DeltaInputs, C: int, compile: bool):
    """Run ``group_fn`` over groups of whole chunks (``groups.over_groups``), carrying S [BH, K, V].

    compile: each group through ``compiled.compiled`` (the same function, fused by torch.compile).
    Returns o [B, T, H, V] and the final state [B, H, K, V].
    """
    B, T, H, K = x.q.shape
    step = groups.group_step(C, GROUP_TOKENS)
    fn = functools.partial(group_fn, scale=x.scale, C=C)
    out = x.v.new_empty(B, T, H, x.v.shape[-1])
    o, S = groups.over_groups(fn, (x.q, x.k, x.v, x.log_alpha, x.beta), x.state.reshape(B * H, K, -1), step, out,
                              compile=compile, chunk_size=C)
    return o, S.reshape(B, H, K, -1)


def chunk_scalar_decay(x: DeltaInputs, C: int, *, erase_reads_decayed: bool = True, compile: bool = False):
    """Delta rule with scalar (or no) decay, chunkwise (eqs. 1-3): S_t = α_t S_{t−1} + k_t u_tᵀ.

    erase_reads_decayed=True: Gated DeltaNet, u_t = β_t (v_t − (α_t S_{t−1})ᵀ k_t), i.e.
    S_t = α_t (I − β_t k kᵀ) S_{t−1} + β_t k vᵀ. False: the joint variant, u_t = β_t (v_t − S_{t−1}ᵀ k_t),
    i.e. S_t = (α_t I − β_t k kᵀ) S_{t−1} + β_t k vᵀ.
    x: q, k [B, T, H, K]; v [B, T, H, V]; log_alpha None or [B, T, H]; beta [B, T, H]; state
    [B, H, K, V]; o_t = S_tᵀ (scale · q_t). Returns o [B, T, H, V] and the final state [B, H, K, V].
    log_alpha is raised to the dtype's underflow floor (``decay.floor_log_decay``: same α, finite
    exponents). When no gradient is recorded the chunked copies are overwritten in place (same values),
    except when compiled (``compiled.py``: inductor plans the buffers); either way the carry then reads
    the state as it goes (``carry_read``), with the decay folded (``fold_plan``) when not compiled.
    """
    grad = records_grad(x.q, x.k, x.v, x.log_alpha, x.beta, x.state)
    group = functools.partial(_scalar_decay_group, in_place=not compile and not grad, grad=grad,
                              erase_reads_decayed=erase_reads_decayed)
    return _over_groups(group, x._replace(log_alpha=floor_log_decay(x.log_alpha)), C, compile)


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
                        grad: bool = True, erase_reads_decayed: bool = True):
    """``chunk_scalar_decay`` on one group of tokens; S: [BH, K, V]. Returns o [B, N, C, H, V] and S.

    in_place: overwrite the chunked copies and intermediates (forward without autograd, eager). grad: a
    gradient is recorded (the carry keeps its states for the backward); without, the carry reads the state
    as it goes (``carry_read``; its decay folded when in_place).
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
        D = segment_sums(la)  # (N, BH, C, C)
        D = D.exp_() if in_place else D.exp()  # (an in-place exp of the island's output would be traced as a copy)
        A = _erase_decay(A, D, in_place, erase_reads_decayed)  # A = diag(β) (K Kᵀ ⊙ D) (joint: D shifted a row)
        P = scaled(P, D, in_place)  # P = (Q Kᵀ) ⊙ D
        del D  # every [N, BH, ·, ·] intermediate is dropped as soon as it is used up (a smaller heap to fault in)
        g_end = g[..., -1:, :]  # (N, BH, 1, 1) log decay of the whole chunk
        a = g_end.exp().to(q.dtype)  # (N, BH, 1, 1)
        # without autograd the carry keeps S / D (``carry_read`` with a plan): D_n in e^{g}, 1 / D_{n+1} in e^{g_C − g}
        plan = fold_plan(g_end[:, :, 0, 0].to(q.dtype)) if in_place else None
        d_in, d_out = (0.0, 0.0) if plan is None else (plan.d_in[..., None, None], plan.d_out[..., None, None])
        E = g if erase_reads_decayed else F.pad(g[..., :-1, :], (0, 0, 1, 0))  # decay the erase sees: g_t or g_{t−1}
        k_beta = scaled(k_beta, (E + d_in).exp().to(q.dtype), in_place)  # β e^{E} ⊙ K
        q = scaled(q, (g + d_in).exp().to(q.dtype), in_place)  # scale e^{g} ⊙ Q: the state read
        k = scaled(k, (g_end - g - d_out).exp().to(q.dtype), in_place)  # e^{g_C − g} ⊙ K: the state write
    P = P.tril_() if in_place else P.tril()  # causal (in place on a view would record CopySlices)
    # 1. UT transform, all chunks at once: [U | W] = T [β ⊙ V | β e^{E} ⊙ K]
    U, W = _solve(A, scaled(v, beta, in_place), k_beta)  # (N, BH, C, V), (N, BH, C, K)
    del A, v, k_beta
    # 2. sequential over chunks: u = U − W S_[n], the state carry (eq. 3) and 3. the read (eq. 2)
    if not grad:
        o, S = _carry_read(U, W, k, q, P, a, S, plan)  # (N, BH, C, V), u overwrites U
    else:
        starts, u, S = _carry(U, W, k, a, S)
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


def chunk_key_decay(x: DeltaInputs, C: int, *, erase_reads_decayed: bool, compile: bool = False):
    """Delta rule with per-key decay S_t = diag(a_t) S_{t−1} + k_t u_tᵀ, chunkwise (eqs. 1-3).

    erase_reads_decayed=False: the joint variant, u_t = β_t (v_t − S_{t−1}ᵀ k_t), i.e.
    S_t = (diag(a_t) − β_t k kᵀ) S_{t−1} + β_t k vᵀ. True: u_t = β_t (v_t − (diag(a_t) S_{t−1})ᵀ k_t).
    x: q, k, log_alpha [B, T, H, K]; v [B, T, H, V]; beta [B, T, H]; state [B, H, K, V].
    Returns o [B, T, H, V] and the final state [B, H, K, V].
    """
    group = functools.partial(_key_decay_group, erase_reads_decayed=erase_reads_decayed)
    return _over_groups(group, x._replace(log_alpha=floor_log_decay(x.log_alpha)), C, compile)


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
    U, W = _solve(A, v * beta, k * (beta * E.exp()))  # (N, BH, C, V), (N, BH, C, K)
    # 2. intra-chunk read weights P_ts = Σ q_t k_s e^{G_t − G_s} (s ≤ t)
    P = _pairwise(q, G, k, G, s, strict=False)  # (N, BH, C, C)
    # 3. sequential over chunks
    q_in = q * G.exp()  # (N, BH, C, K)
    k_out = k * (G[..., -1:, :] - G).exp()  # (N, BH, C, K)
    a = G[..., -1, :].exp()[..., None]  # (N, BH, K, 1)
    starts, u, S = _carry(U, W, k_out, a, S)
    # 4. read (eq. 2)
    o = q_in @ starts + P @ u  # (N, BH, C, V)
    return _group_out(o, B), S


def chunk_low_rank(q, k, v, log_alpha, beta, kappa, state, scale: float, C: int, compile: bool = False):
    """Diagonal plus low rank (RWKV-7) chunkwise: S_t = diag(a_t) S_{t−1} + x_t v_tᵀ + y_t e_tᵀ with the
    write x_t = β_t ⊙ k_t, the erase y_t = β_t ⊙ κ_t and its values e_t = −S_{t−1}ᵀ κ_t.

    Unrolled in a chunk (E_t = G_{t−1}, the erase reads S_{t−1}):
        (I + A_yy) e = −A_yx V − (e^{E} ⊙ κ) S_[n],  A_yz,ts = Σ κ_t z_s e^{E_t − G_s} (s < t)   (1')
    so e = U_e − W_e S_[n] by the UT transform, and the 2C writes [x; y] of the values [v; e] are
    carried (eq. 3) and read (eq. 2) as one chunk of twice the length.
    q, k, log_alpha, beta, kappa: [B, T, H, K]; v: [B, T, H, V]; state: [B, H, K, V].
    """
    B, T, H, K = q.shape
    fn = functools.partial(_low_rank_group, scale=scale, C=C)
    out = v.new_empty(B, T, H, v.shape[-1])
    o, S = groups.over_groups(fn, (q, k, v, floor_log_decay(log_alpha), beta, kappa), state.reshape(B * H, K, -1),
                              groups.group_step(C, GROUP_TOKENS), out, compile=compile, chunk_size=C)
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
    U_e, W_e = _solve(A_yy, -(A_yx @ v), kappa * E.exp())  # (N, BH, C, V), (N, BH, C, K)
    # 2. carry the 2C writes [x; y] with values [v; e] over the chunks (eq. 3)
    out_decay = (G[..., -1:, :] - G).exp()  # (N, BH, C, K)
    U = torch.cat((v, U_e), dim=-2)  # (N, BH, 2C, V)
    W = torch.cat((torch.zeros_like(W_e), W_e), dim=-2)  # (N, BH, 2C, K)
    starts, u, S = _carry(U, W, torch.cat((x * out_decay, y * out_decay), dim=-2), G[..., -1, :].exp()[..., None], S)
    # 3. read (eq. 2): the chunk-start state and the writes up to t
    P = torch.cat((_pairwise(q, G, x, G, s, strict=False), _pairwise(q, G, y, G, s, strict=False)), dim=-1)
    o = (q * G.exp()) @ starts + P @ u  # (N, BH, C, V)
    return _group_out(o, B), S
