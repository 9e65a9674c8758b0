"""Spectral memory of SeqCond Attention (SCA): the functional op in three forms.

Nautile-370M §2.2.3–2.2.4 (Algorithm 1, steps 3–5).
Per head, the memory is the weighted empirical characteristic function of the
prefix, sampled at M learned spectral points θ and normalised by the total weight:

    φ_t   = u_t θ                                   phase, u_t = softsign(η k_t) in SCA
    den_t = den_{t-1} + p_t                         Z_t  = Σ_{τ≤t} α_τ
    num_t = num_{t-1} + p_t v_t e^{iφ_t}            R_t + i I_t
    S_t   = num_t / max(den_t, den_floor)           normalised state (R̂, Î)
    o_t   = scale · Σ_m w_m · S_t[m] · conj(q_t[m]) Hermitian readout (step 5)

Op contract (shared with ``derive`` for a ``Spectral`` memory)::

    o, state = <form>_spectral(q, k, v, *, beta, theta, weights, scale=None, den_floor=1e-4,
                               initial_state=None, output_final_state=False)
    q:       [B, T, H, D, M, 2]  query spectrum (re, im), already expanded to the H memory heads
    k:       [B, T, H, D]        phase argument u; φ = u[..., None] · θ  -> [B, T, H, D, M]
    v:       [B, T, H, D]        amplitude (SCA passes the key itself)
    beta:    [B, T, H]           contribution weight p_t > 0
    theta:   [H, D, M]           spectral points
    weights: [H, D, M]           integration weights w
    scale:   default D**-0.5
    state:   (den [B, H], num [B, H, D, M, 2]), unnormalised Σp and Σ p·v·(cos φ, sin φ)
    o:       [B, T, H, D, 2] (re, im); state is None unless output_final_state.

Forms: ``recurrent_spectral`` (the token loop, written from the equations),
``prefix_sum_spectral`` (``torch.cumsum`` over T) and ``masked_matmul_spectral``
(an L×L lower-triangular ones matrix times the contributions; the Nautile
config's ``use_square_matrix``, for short sequences: O(T²) time and memory).
Dtypes as every op (contract.py): the inputs (q, k, v, beta, theta, weights, initial state) may differ
in float dtype; all three forms accumulate in their promotion with bf16/fp16 raised to float32 (float32
for float32/bf16 inputs, float64 once any input is float64); ``o`` is returned in v's dtype and the
state in the accumulation dtype. All are differentiable by autograd.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .compiled import compiled, mark_time_dynamic
from .contract import check_float, compute_dtype

__all__ = [
    "SpectralState",
    "recurrent_spectral",
    "prefix_sum_spectral",
    "masked_matmul_spectral",
    "spectral_contributions",
    "spectral_read",
    "spectral_running_state",
]

SpectralState = tuple[Tensor, Tensor]  # (den [B, H], num [B, H, D, M, 2])


def _expect(name: str, x: Tensor, shape: tuple[int, ...], layout: str) -> None:
    check_float(name, x, layout)
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {layout} = {list(shape)}, got {list(x.shape)}")


def _check_inputs(q, k, v, beta, theta, weights, initial_state) -> tuple[int, ...]:
    """Validate the op contract; returns (B, T, H, D, M)."""
    if not torch.is_tensor(q) or q.dim() != 6 or q.shape[-1] != 2:
        got = list(q.shape) if torch.is_tensor(q) else type(q).__name__
        raise ValueError(f"q must have shape [B, T, H, D, M, 2] (re, im), got {got}")
    B, T, H, D, M, _ = q.shape
    if T < 1:
        raise ValueError(f"q must hold at least one time step, got T = {T}")
    _expect("q", q, (B, T, H, D, M, 2), "[B, T, H, D, M, 2]")
    _expect("k", k, (B, T, H, D), "[B, T, H, D]")
    _expect("v", v, (B, T, H, D), "[B, T, H, D]")
    _expect("beta", beta, (B, T, H), "[B, T, H]")
    _expect("theta", theta, (H, D, M), "[H, D, M]")
    _expect("weights", weights, (H, D, M), "[H, D, M]")
    if initial_state is not None:
        if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 2:
            raise TypeError("initial_state must be a pair (den [B, H], num [B, H, D, M, 2]), "
                            f"got {type(initial_state).__name__}")
        _expect("initial_state[0] (den)", initial_state[0], (B, H), "[B, H]")
        _expect("initial_state[1] (num)", initial_state[1], (B, H, D, M, 2), "[B, H, D, M, 2]")
    return B, T, H, D, M


def spectral_contributions(k: Tensor, v: Tensor, beta: Tensor, theta: Tensor) -> Tensor:
    """Complex contributions p_t v_t e^{iφ_t} (Algorithm 1, step 3).

    k, v: [..., H, D]; beta: [..., H]; theta: [H, D, M]  ->  [..., H, D, M, 2] (re, im).
    """
    phi = k[..., None] * theta  # [..., H, D, M]
    amp = (beta[..., None] * v)[..., None]  # [..., H, D, 1]
    return torch.stack((amp * torch.cos(phi), amp * torch.sin(phi)), dim=-1)


def spectral_read(den: Tensor, num: Tensor, q: Tensor, weights: Tensor,
                  scale: float, den_floor: float) -> Tensor:
    """Normalise and read out (Algorithm 1, steps 4–5): o = scale Σ_m w S conj(q).

    den: [..., H]; num, q: [..., H, D, M, 2]; weights: [H, D, M]  ->  [..., H, D, 2].
    """
    S = num / torch.clamp(den, min=den_floor)[..., None, None, None]  # [..., H, D, M, 2]
    s_re, s_im = S.unbind(-1)
    q_re, q_im = q.unbind(-1)
    o_re = (weights * (s_re * q_re + s_im * q_im)).sum(-1)  # [..., H, D]
    o_im = (weights * (s_im * q_re - s_re * q_im)).sum(-1)
    return scale * torch.stack((o_re, o_im), dim=-1)


def _initial(initial_state, B, H, D, M, dtype, device) -> SpectralState:
    if initial_state is None:
        return (torch.zeros(B, H, dtype=dtype, device=device),
                torch.zeros(B, H, D, M, 2, dtype=dtype, device=device))
    return initial_state[0].to(dtype), initial_state[1].to(dtype)


def recurrent_spectral(q, k, v, *, beta, theta, weights, scale=None, den_floor=1e-4,
                       initial_state=None, output_final_state=False):
    """Token-by-token recurrence, written from Nautile §2.2.3 ("causal summary").

    Shapes as in the module docstring. Returns (o [B, T, H, D, 2], state or None).
    """
    B, T, H, D, M = _check_inputs(q, k, v, beta, theta, weights, initial_state)
    scale = D ** -0.5 if scale is None else scale
    qa, ka, va, pa, th, w, initial_state = _in_compute_dtype(q, k, v, beta, theta, weights, initial_state)
    den, num = _initial(initial_state, B, H, D, M, qa.dtype, q.device)
    outs = []
    for t in range(T):
        # 1. contribution c_t = p_t v_t e^{iφ_t}, φ_t = u_t θ          [B, H, D, M, 2]
        c = spectral_contributions(ka[:, t], va[:, t], pa[:, t], th)
        # 2. write: den_t = den_{t-1} + p_t,  num_t = num_{t-1} + c_t
        den = den + pa[:, t]
        num = num + c
        # 3. read after the write: o_t = scale Σ_m w S_t conj(q_t)    [B, H, D, 2]
        outs.append(spectral_read(den, num, qa[:, t], w, scale, den_floor))
    o = torch.stack(outs, dim=1).to(v.dtype)  # [B, T, H, D, 2]
    return o, ((den, num) if output_final_state else None)


def spectral_running_state(k, v, *, beta, theta, initial_state=None):
    """Running unnormalised sums for every t by ``torch.cumsum`` (causal by construction).

    k, v: [B, T, H, D]; beta: [B, T, H]; theta: [H, D, M]; initial_state as in the contract.
    Returns (den_t [B, T, H], num_t [B, T, H, D, M, 2]) in the accumulation dtype (``compute_dtype``).
    """
    acc = compute_dtype(k, v, beta, theta, initial_state)
    p = beta.to(acc)
    c = spectral_contributions(k.to(acc), v.to(acc), p, theta.to(acc))  # [B, T, H, D, M, 2]
    den_t, num_t = p.cumsum(dim=1), c.cumsum(dim=1)
    if initial_state is not None:
        den_t = den_t + initial_state[0].to(acc)[:, None]
        num_t = num_t + initial_state[1].to(acc)[:, None]
    return den_t, num_t


def _masked_matmul_running_state(k, v, beta, theta, initial_state):
    """As ``spectral_running_state``, with the prefix sums as one L×L causal-mask matmul."""
    acc = compute_dtype(k, v, beta, theta, initial_state)
    B, T, H, D = k.shape
    M = theta.shape[-1]
    p = beta.to(acc)
    c = spectral_contributions(k.to(acc), v.to(acc), p, theta.to(acc))  # [B, T, H, D, M, 2]
    feats = torch.cat((p, c.reshape(B, T, H * D * M * 2)), dim=-1)  # [B, T, H + H·D·M·2]
    mask = torch.tril(torch.ones(T, T, dtype=acc, device=k.device))  # mask[t, τ] = 1 if τ ≤ t
    run = mask @ feats  # [B, T, H + H·D·M·2]
    den_t, num_t = run[..., :H], run[..., H:].reshape(B, T, H, D, M, 2)
    if initial_state is not None:
        den_t = den_t + initial_state[0].to(acc)[:, None]
        num_t = num_t + initial_state[1].to(acc)[:, None]
    return den_t, num_t


def _in_compute_dtype(q, k, v, beta, theta, weights, initial_state):
    """Every input cast to the compute dtype of them all (contract.py)."""
    acc = compute_dtype(q, k, v, beta, theta, weights, initial_state)
    state = None if initial_state is None else tuple(t.to(acc) for t in initial_state)
    return (*(x.to(acc) for x in (q, k, v, beta, theta, weights)), state)


def _parallel_readout(q, den_t, num_t, weights, scale, den_floor, output_final_state, out_dtype):
    D = q.shape[3]
    scale = D ** -0.5 if scale is None else scale
    o = spectral_read(den_t, num_t, q, weights, scale, den_floor)
    state = (den_t[:, -1], num_t[:, -1]) if output_final_state else None
    return o.to(out_dtype), state


def prefix_sum_spectral(q, k, v, *, beta, theta, weights, scale=None, den_floor=1e-4,
                        initial_state=None, output_final_state=False, compile=False):
    """Parallel form: Algorithm 1 step 4 as ``torch.cumsum`` over T, then step 5.

    Shapes as in the module docstring. Returns (o [B, T, H, D, 2], state or None).
    compile: steps 4-5 as one torch.compile'd graph (``compiled.py``; the time axis dynamic).
    """
    _check_inputs(q, k, v, beta, theta, weights, initial_state)
    out_dtype = v.dtype
    q, k, v, beta, theta, weights, initial_state = _in_compute_dtype(q, k, v, beta, theta, weights, initial_state)
    if compile:
        mark_time_dynamic(q, k, v, beta)
        return compiled(_prefix_sum)(q, k, v, beta, theta, weights, scale, den_floor, initial_state,
                                     output_final_state, out_dtype)
    return _prefix_sum(q, k, v, beta, theta, weights, scale, den_floor, initial_state, output_final_state, out_dtype)


def _prefix_sum(q, k, v, beta, theta, weights, scale, den_floor, initial_state, output_final_state, out_dtype):
    """Steps 4-5 of ``prefix_sum_spectral`` on checked inputs in the compute dtype."""
    den_t, num_t = spectral_running_state(k, v, beta=beta, theta=theta, initial_state=initial_state)
    return _parallel_readout(q, den_t, num_t, weights, scale, den_floor, output_final_state, out_dtype)


def masked_matmul_spectral(q, k, v, *, beta, theta, weights, scale=None, den_floor=1e-4,
                           initial_state=None, output_final_state=False):
    """Parallel form for short sequences: prefix sums as tril(1_{T×T}) @ contributions.

    Shapes as in the module docstring. Returns (o [B, T, H, D, 2], state or None).
    """
    _check_inputs(q, k, v, beta, theta, weights, initial_state)
    out_dtype = v.dtype
    q, k, v, beta, theta, weights, initial_state = _in_compute_dtype(q, k, v, beta, theta, weights, initial_state)
    den_t, num_t = _masked_matmul_running_state(k, v, beta, theta, initial_state)
    return _parallel_readout(q, den_t, num_t, weights, scale, den_floor, output_final_state, out_dtype)
