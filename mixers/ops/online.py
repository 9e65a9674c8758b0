"""Hand-written recurrences of the online-regression mixers with no parallel
form: Titans' momentum memory, Yaad-style Huber, Moneta-style ℓp, TTT-Linear
and the ℓ1 (sparse-update) retention. Written from the published update rules
(Behrouz et al. 2024, Titans; Behrouz et al. 2025, Miras (Yaad, Moneta); Sun et
al. 2024, TTT; ℓ1: thesis §2.4.3), in the op contract; the autograd derivation
is checked against these.

State S ∈ R^{K×V} (f_S(k) = Sᵀk; the papers' M = Sᵀ). Each step:
    1. retain:  S' = α_t S_{t−1}                     (α_t = exp(log_alpha), 1 if absent)
    2. error:   e_t = S'ᵀk_t − v_t                    (prediction error at the retained state)
    3. write:   S_t = S' − β_t k_t g(e_t)ᵀ            (g from the bias)
    4. read:    o_t = S_tᵀ(scale·q_t)
With ``steps: K`` (recurrent depth, thesis eq. 5.1) steps 2–3 run K times before the read.
Dtypes as every op (contract.py, ``in_compute_dtype``): inputs of different float dtypes compute in their
promotion with bf16/fp16 raised to float32; o comes back in v's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .contract import in_compute_dtype

__all__ = ["recurrent_huber_delta", "recurrent_lp_delta", "recurrent_titans", "recurrent_ttt_linear",
           "recurrent_l1"]


def _prep(q, v, log_alpha, beta, scale, initial_state):
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.clone()
    alpha = q.new_ones(B, T, H) if log_alpha is None else log_alpha.exp()
    beta = q.new_ones(B, T, H) if beta is None else beta
    scale = K ** -0.5 if scale is None else scale
    return S, alpha, beta, scale


def _error_driven(g, q, k, v, log_alpha, beta, scale, initial_state, output_final_state, steps=1):
    S, alpha, beta, scale = _prep(q, v, log_alpha, beta, scale, initial_state)
    outs = []
    for t in range(q.shape[1]):
        kt, vt = k[:, t], v[:, t]  # (B, H, K), (B, H, V)
        S = alpha[:, t, :, None, None] * S  # 1. retain
        for _ in range(steps):
            e = torch.einsum("bhk,bhkv->bhv", kt, S) - vt  # 2. error
            S = S - beta[:, t, :, None, None] * kt[..., :, None] * g(e)[..., None, :]  # 3. write
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t], S))  # 4. read
    return torch.stack(outs, 1), (S if output_final_state else None)


@in_compute_dtype
def recurrent_huber_delta(q, k, v, *, delta=1.0, steps=1, log_alpha=None, beta=None, scale=None,
                          initial_state=None, output_final_state=False):
    """Huber attentional bias (Yaad-style): g(e) = clamp(e, −δ, δ), coordinate-wise."""
    return _error_driven(lambda e: e.clamp(-delta, delta), q, k, v, log_alpha, beta, scale,
                         initial_state, output_final_state, steps)


@in_compute_dtype
def recurrent_lp_delta(q, k, v, *, p=3.0, clip=None, eps=None, steps=1, log_alpha=None, beta=None, scale=None,
                       initial_state=None, output_final_state=False):
    """ℓp attentional bias (Moneta-style), ℓ = ‖e‖_p^p: g(e) = p·sign(e)|e|^{p−1}; with ``clip`` = c,
    g(e) = p·sign(e)·min(|e|, c)^{p−1} (the loss continues linearly beyond c); with ``eps`` = ε (p < 2),
    g(e) = p ε^{p−2} e for |e| < ε (quadratic there: memories/bias.py, Lp)."""
    def g(e):
        a = e.abs().clamp(min=eps, max=clip)  # eps: no 0 ever reaches pow or its derivative
        outer = p * torch.sign(e) * a.pow(p - 1)
        return outer if eps is None else torch.where(e.abs() >= eps, outer, p * eps ** (p - 2) * e)

    return _error_driven(g, q, k, v, log_alpha, beta, scale, initial_state, output_final_state, steps)


@in_compute_dtype
def recurrent_l1(q, k, v, *, lam, bias="l2", steps=1, beta=None, scale=None, initial_state=None,
                 output_final_state=False):
    """ℓ1 retention R = λ‖S − S_{t−1}‖₁ by proximal gradient (ISTA), ℓ2 or dot-product bias:

        1. gradient step on ℓ at S:  Δ ← Δ − β_t k_t g_tᵀ,  g_t = Sᵀk_t − v_t (ℓ2) or −v_t (dot product)
        2. shrink the change:        Δ ← sign(Δ) max(|Δ| − β_t λ, 0)
        3. S = S_{t−1} + Δ;  steps 1–3 K times (Δ starts at 0), then o_t = S_tᵀ(scale·q_t)
    """
    S, _, beta, scale = _prep(q, v, None, beta, scale, initial_state)
    outs = []
    for t in range(q.shape[1]):
        kt, vt, bt = k[:, t], v[:, t], beta[:, t, :, None, None]  # (B, H, K), (B, H, V), (B, H, 1, 1)
        change = torch.zeros_like(S)
        for _ in range(steps):
            g = torch.einsum("bhk,bhkv->bhv", kt, S + change) - vt if bias == "l2" else -vt  # (B, H, V)
            change = change - bt * kt[..., :, None] * g[..., None, :]  # 1.
            change = torch.sign(change) * torch.clamp(change.abs() - bt * lam, min=0.0)  # 2.
        S = S + change  # 3.
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t], S))
    return torch.stack(outs, 1), (S if output_final_state else None)


@in_compute_dtype
def recurrent_titans(q, k, v, *, eta=None, momentum=0.9, log_alpha=None, beta=None, scale=None,
                     initial_state=None, output_final_state=False):
    """Titans' linear memory with momentum (Behrouz et al. 2024), S in [K, V] layout:

        1. m_t = η_t m_{t−1} − θ_t ∇ℓ(S_{t−1}),  ∇ℓ = k_t (S_{t−1}ᵀk_t − v_t)ᵀ   (θ_t = β_t)
        2. S_t = α_t S_{t−1} + m_t
        3. o_t = S_tᵀ(scale·q_t)
    State is the pair (S, m); ``eta`` [B, T, H] or the constant ``momentum``.
    """
    B, T, H, K = q.shape
    S0 = None if initial_state is None else initial_state[0]
    S, alpha, beta, scale = _prep(q, v, log_alpha, beta, scale, S0)
    m = torch.zeros_like(S) if initial_state is None else initial_state[1].clone()
    eta = q.new_full((B, T, H), momentum) if eta is None else eta
    outs = []
    for t in range(T):
        kt = k[:, t]
        err = torch.einsum("bhk,bhkv->bhv", kt, S) - v[:, t]
        m = eta[:, t, :, None, None] * m - beta[:, t, :, None, None] * kt[..., :, None] * err[..., None, :]
        S = alpha[:, t, :, None, None] * S + m
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t], S))
    return torch.stack(outs, 1), ((S, m) if output_final_state else None)


@in_compute_dtype
def recurrent_ttt_linear(q, k, v, *, beta=None, scale=None, initial_state=None, output_final_state=False,
                         eps=1e-6):
    """TTT-Linear with per-token (online, mini-batch size 1) updates (Sun et al. 2024):

        f_S(x) = x + LN(Sᵀx)      ℓ = ½‖f_S(k_t) − v_t‖²
        1. z = Sᵀk_t, n = LN(z) = (z − μ)/σ,  e = k_t + n − v_t
        2. ∇_z ℓ = (1/σ)(e − mean(e) − n·mean(e ⊙ n))          (backprop through LayerNorm)
        3. S_t = S_{t−1} − β_t k_t (∇_z ℓ)ᵀ
        4. o_t = f_{S_t}(scale·q_t)
    Requires K == V. The LayerNorm has no affine parameters (eps as in torch).
    """
    S, _, beta, scale = _prep(q, v, None, beta, scale, initial_state)
    outs = []
    for t in range(q.shape[1]):
        kt = k[:, t]
        z = torch.einsum("bhk,bhkv->bhv", kt, S)
        mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        sigma = torch.sqrt(var + eps)
        n = (z - mu) / sigma
        e = kt + n - v[:, t]
        gz = (e - e.mean(-1, keepdim=True) - n * (e * n).mean(-1, keepdim=True)) / sigma
        S = S - beta[:, t, :, None, None] * kt[..., :, None] * gz[..., None, :]
        x = scale * q[:, t]
        read = torch.einsum("bhk,bhkv->bhv", x, S)
        outs.append(x + F.layer_norm(read, read.shape[-1:], eps=eps))
    return torch.stack(outs, 1), (S if output_final_state else None)
