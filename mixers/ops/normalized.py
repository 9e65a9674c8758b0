"""Normalised linear attention (thesis eqs. 2.31–2.36): the read-out divided by its normaliser.

    y_t = M_t φ(q_t) / (Z_t φ(q_t)),   M_t = M_{t−1} + v_t φ(k_t)ᵀ,   Z_t = Z_{t−1} + φ(k_t)ᵀ   (2.34–2.36)

Z_t is the state of the same Hebbian write with the value 1, so the spec stays a dot-product /
gd spec: the op runs on v' = [v, 1] (one more value column), its state S' = [S, z] ∈ R^{K×(V+1)}
holds Z_tᵀ in its last column, and the read o' = S'ᵀ(scale · q) = [num, den] gives
o = num / (den + ε), ε = 1e-10 as FLA's ``naive_recurrent_linear_attn(normalize=True)``. The
scale cancels (up to ε); decay gates and β apply to Z_t as to M_t (a decayed, weighted normaliser).

    o, S' = normalized(op)(q, k, v, **gates, initial_state=S' or None, output_final_state=...)
    v: [B, T, H, V] -> o: [B, T, H, V];  S': [B, H, K, V + 1]

Dtypes as every op (contract.py): v' and the division are in the compute dtype of all the inputs
(their promotion, bf16/fp16 raised to float32), o is returned in v's dtype.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from .contract import compute_dtype

__all__ = ["EPS", "normalized"]

EPS = 1e-10  # added to the denominator, as FLA's naive_recurrent_linear_attn(normalize=True)


def normalized(op: Callable) -> Callable:
    """The normalised read-out of a Hebbian op with the op contract (module docstring)."""

    @functools.wraps(op)
    def fn(q, k, v, *, initial_state=None, output_final_state=False, **gates):
        cd = compute_dtype(q, k, v, initial_state, *gates.values())
        ones = v.new_ones(*v.shape[:3], 1, dtype=cd)
        o, S = op(q, k, torch.cat((v.to(cd), ones), dim=-1), initial_state=initial_state,  # (B, T, H, V + 1)
                  output_final_state=output_final_state, **gates)
        return (o[..., :-1] / (o[..., -1:] + EPS)).to(v.dtype), S

    fn.normalized = True
    return fn
