"""Recurrent depth (thesis §5.2, eq. 5.1): K writes per token, and the one write they equal.

    M_t^{j+1} = f(M_t^j, x_t),  j = 0 … K−1,   M_t^0 = M_{t−1} (retention applied once)

Per head, S = Mᵀ ∈ R^{K×V}, n_t = ‖k_t‖².

* ℓ2 bias, gradient steps with rate β (the delta rule): one step S ← S + β k eᵀ with the error
  e = v − Sᵀk leaves the error e' = (1 − β n) e. So K steps write Σ_{j<K} β (1 − β n)^j k eᵀ,
  with e the error before the first one: ONE delta step with

      β_eff = β Σ_{j<K} (1 − β n)^j  =  (1 − (1 − β n)^K) / n.

* ℓ2 bias, proximal (implicit, Longhorn) steps: each is a delta step with ε = β / (1 + β n),
  i.e. the error shrinks by 1 / (1 + β n). K of them are one proximal step with

      β' = β Σ_{j<K} (1 + β n)^j  =  ((1 + β n)^K − 1) / n     (then ε' = β' / (1 + β' n)).

* dot-product bias: the gradient −v kᵀ does not depend on S, so K steps write K β v kᵀ.

So for an ℓ2 bias recurrent depth only reparametrises β (the delta family's chunk form runs with
β → β_eff); only a non-quadratic bias or an MLP memory gains anything from it (class scan).

``*_beta(k, beta, steps)`` compute the single-step β as geometric sums (Horner, no division, so
n → 0 is fine and gradients are exact). ``recurrent_*_steps`` are the hand-written unrolled
loops (K writes per token, numbered steps) that ``verify`` compares with both.

    o, S = recurrent_delta_steps(q, k, v, *, steps, implicit=False, log_alpha=None, beta=None, scale=None,
                                 initial_state=None, output_final_state=False)
    q, k: [B, T, H, K]; v: [B, T, H, V]; log_alpha: None, [B, T, H] or [B, T, H, K]; beta: None or [B, T, H]

Dtypes as every op (contract.py): the compute dtype is the inputs' promotion with bf16/fp16 raised to
float32; ``o`` is returned in v's dtype, the final state in the compute dtype.
"""
from __future__ import annotations

import torch

from .contract import check_matrix_inputs

__all__ = ["gd_beta", "implicit_beta", "hebbian_beta", "recurrent_delta_steps", "recurrent_hebbian_steps"]


def _ones_like_beta(k: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    return k.new_ones(k.shape[:3]) if beta is None else beta


def _geometric(r: torch.Tensor, steps: int) -> torch.Tensor:
    """Σ_{j<steps} r^j by Horner's rule: s ← 1 + r s."""
    s = torch.ones_like(r)
    for _ in range(steps - 1):
        s = 1 + r * s
    return s


def gd_beta(k: torch.Tensor, beta: torch.Tensor | None, steps: int) -> torch.Tensor:
    """β_eff [B, T, H] of ``steps`` GD steps on ℓ2: β Σ_{j<K} (1 − β‖k‖²)^j. k: [B, T, H, K]."""
    beta = _ones_like_beta(k, beta)
    return beta * _geometric(1 - beta * (k * k).sum(-1), steps)


def implicit_beta(k: torch.Tensor, beta: torch.Tensor | None, steps: int) -> torch.Tensor:
    """β' [B, T, H] of ``steps`` proximal steps on ℓ2: β Σ_{j<K} (1 + β‖k‖²)^j."""
    beta = _ones_like_beta(k, beta)
    return beta * _geometric(1 + beta * (k * k).sum(-1), steps)


def hebbian_beta(k: torch.Tensor, beta: torch.Tensor | None, steps: int) -> torch.Tensor:
    """K·β [B, T, H]: ``steps`` GD steps on the dot-product bias."""
    return steps * _ones_like_beta(k, beta)


def _decay(S: torch.Tensor, la_t: torch.Tensor | None) -> torch.Tensor:
    """diag(α_t) S for S [B, H, K, V]; la_t: None, [B, H] or [B, H, K]."""
    if la_t is None:
        return S
    a = la_t.exp()
    return S * (a[..., None, None] if a.dim() == 2 else a[..., None])


def _unrolled(fn: str, write, q, k, v, log_alpha, beta, scale, initial_state, output_final_state):
    cd = check_matrix_inputs(fn, q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    B, T, H, K = q.shape
    scale = K ** -0.5 if scale is None else float(scale)
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=cd) if initial_state is None else initial_state.to(cd)
    beta = q.new_ones(B, T, H, dtype=cd) if beta is None else beta.to(cd)
    outs = []
    for t in range(T):
        k_t, v_t, b_t = k[:, t].to(cd), v[:, t].to(cd), beta[:, t]  # (B, H, K), (B, H, V), (B, H)
        # 1. retention, once: S' = diag(α_t) S_{t−1}
        S = _decay(S, None if log_alpha is None else log_alpha[:, t].to(cd))
        # 2. the K writes
        S = write(S, k_t, v_t, b_t)
        # 3. read after the writes: o_t = S_tᵀ (scale · q_t)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, scale * q[:, t].to(cd)))
    return torch.stack(outs, 1).to(v.dtype), (S if output_final_state else None)


def recurrent_delta_steps(q, k, v, *, steps: int, implicit: bool = False, log_alpha=None, beta=None,
                          scale=None, initial_state=None, output_final_state=False):
    """K delta-rule writes per token (GD steps, or proximal steps if ``implicit``), one by one.

    Per write: c = β_t (GD) or β_t / (1 + β_t ‖k_t‖²) (proximal); u = c (v_t − Sᵀ k_t); S ← S + k_t uᵀ.
    """
    def write(S, k_t, v_t, b_t):
        c = b_t / (1 + b_t * (k_t * k_t).sum(-1)) if implicit else b_t  # (B, H)
        for _ in range(steps):
            u = c[..., None] * (v_t - torch.einsum("bhkv,bhk->bhv", S, k_t))  # (B, H, V)
            S = S + k_t[..., :, None] * u[..., None, :]  # (B, H, K, V)
        return S

    return _unrolled("recurrent_delta_steps", write, q, k, v, log_alpha, beta, scale, initial_state,
                     output_final_state)


def recurrent_hebbian_steps(q, k, v, *, steps: int, log_alpha=None, beta=None, scale=None,
                            initial_state=None, output_final_state=False):
    """K Hebbian writes per token, one by one: S ← S + β_t k_t v_tᵀ, K times."""
    def write(S, k_t, v_t, b_t):
        for _ in range(steps):
            S = S + (b_t[..., None] * k_t)[..., :, None] * v_t[..., None, :]
        return S

    return _unrolled("recurrent_hebbian_steps", write, q, k, v, log_alpha, beta, scale, initial_state,
                     output_final_state)
