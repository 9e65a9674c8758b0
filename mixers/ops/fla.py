"""FLA's Triton kernels (flash-linear-attention) in the op contract of their class (contract.py).

    o, S = fla_op(name, q, k, v, *, log_alpha=None, beta=None, removal_key=None, scale=None,
                  initial_state=None, output_final_state=False, chunk_size=None, cu_seqlens=None,
                  step=False, kernels=None)

``name`` is a row of ``FLA_KERNELS``; ``step`` picks its decode-time kernel (FLA's fused_recurrent_*)
instead of the chunk kernel. Every FLA entry point takes [B, T, H, D] inputs (head_first=False) and
states [N, H, K, V] (our [B, H, K, V]; N = B, or the number of sequences with ``cu_seqlens``, when B
must be 1: FLA's varlen packing, which this contract passes through).

    row               FLA chunk / decode entry points                           our inputs as FLA's
    linear_attn       chunk_linear_attn / fused_recurrent_linear_attn           v ← β v, normalize=False
    simple_gla        chunk_simple_gla / fused_recurrent_simple_gla             g = log α [B, T, H], v ← β v
    retention         chunk_simple_gla / fused_recurrent_simple_gla             g_gamma = log α[0, 0] [H], v ← β v
    gla               chunk_gla / fused_recurrent_gla                           g = log α [B, T, H, K], v ← β v
    delta_rule        chunk_delta_rule / fused_recurrent_delta_rule             β (1 if None)
    gated_delta_rule  chunk_gated_delta_rule / fused_recurrent_gated_delta_rule g = log α (0 if None), β
    kda               chunk_kda / fused_recurrent_kda                           g = log α per key (a scalar
                                                                                one broadcast), β
    dplr              chunk_dplr_delta_rule / fused_recurrent_dplr_delta_rule   k ← β ⊙ k, a = −κ, b = β ⊙ κ,
                                                                                gk = log α per key

β folds into v where FLA's kernel has no write strength (β k vᵀ = k (β v)ᵀ). Gates are log-space in
every FLA kernel (``g`` = log α, not α) and computed in float32. The delta-class kernels get
``use_qk_l2norm_in_kernel=False`` (the layer normalises q and k itself). ``retention`` is the fixed
per-head decay (RetNet): FLA's ``g_gamma`` path, whose backward does not run the gated kernel FLA
refuses on Hopper with Triton < 3.7.1 (kernels.py); it reads the decay of the first token, which a
fixed-decay spec has at every token, so the gradient with respect to log α lands on that token (the
layer's fixed decay is a constant: nothing learns from it).

Scale: ours and FLA's default are both K**-0.5; it is passed explicitly. ``chunk_size`` is ignored:
FLA picks its own chunk (the layer's chunk_size tunes our torch forms).

Dtypes: the kernel dtype is the half dtype among q, k, v if any is half (what autocast produced),
else q's; q, k, v, β, a, b go to it, gates to float32, the initial state to float32 (FLA's GLA and
KDA require it). o comes back in the kernel dtype, the final state in float32. (float64, which no
FLA kernel takes, stays float64 throughout, for FLA's naive references re-typed to float64.)

kernels: a namespace holding FLA's entry points under their FLA names and signatures; None means
``fla.ops``, imported at the first call (it needs triton and a GPU, so never at import time). This
is the injection point: on CPU the tests pass FLA's own pure-torch naive references under the same
names (mixers/external.py fla_naive_kernels; tests/mixers/test_fla_backend.py), so the mapping above is checked without a GPU.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import torch

__all__ = ["FlaKernel", "FLA_KERNELS", "fla_op", "kernel_dtype", "accumulate_dtype"]

HALF = (torch.bfloat16, torch.float16)


def kernel_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.dtype:
    """The dtype FLA's kernel computes in: the half dtype among q, k, v (autocast's), else q's."""
    return next((x.dtype for x in (q, k, v) if x.dtype in HALF), q.dtype)


def _fold(v: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    return v if beta is None else (v * beta[..., None]).to(v.dtype)


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """Gates and states: float32 (float64 stays float64, which no FLA kernel takes but its naive references do)."""
    return torch.promote_types(dtype, torch.float32)


def _per_key(x: torch.Tensor | None, q: torch.Tensor, fill: float) -> torch.Tensor:
    """x ([B, T, H] or [B, T, H, K], or None = ``fill``) as [B, T, H, K] in float32."""
    acc = accumulate_dtype(q.dtype)
    if x is None:
        return q.new_full(q.shape, fill, dtype=acc)
    x = x.to(acc)
    return x if x.dim() == 4 else x[..., None].expand(q.shape)


def _gate(log_alpha: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    acc = accumulate_dtype(q.dtype)
    return q.new_zeros(q.shape[:3], dtype=acc) if log_alpha is None else log_alpha.to(acc)


def _step_size(beta: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    return q.new_ones(q.shape[:3]) if beta is None else beta.to(q.dtype)


# FLA's arguments from ours, already in the kernel dtype: (q, k, v, log_alpha, beta, removal_key) -> keywords
def _linear_attn(q, k, v, log_alpha, beta, removal_key):
    return dict(q=q, k=k, v=_fold(v, beta), normalize=False)


def _simple_gla(q, k, v, log_alpha, beta, removal_key):
    return dict(q=q, k=k, v=_fold(v, beta), g=_gate(log_alpha, q))


def _retention(q, k, v, log_alpha, beta, removal_key):
    return dict(q=q, k=k, v=_fold(v, beta), g_gamma=_gate(log_alpha, q)[0, 0])


def _gla(q, k, v, log_alpha, beta, removal_key):  # the gate is positional: chunk_gla's g, fused_recurrent_gla's gk
    return dict(q=q, k=k, v=_fold(v, beta)), (_per_key(log_alpha, q, 0.0),)


def _delta_rule(q, k, v, log_alpha, beta, removal_key):
    return dict(q=q, k=k, v=v, beta=_step_size(beta, q), use_qk_l2norm_in_kernel=False)


def _gated_delta_rule(q, k, v, log_alpha, beta, removal_key):
    return dict(q=q, k=k, v=v, g=_gate(log_alpha, q), beta=_step_size(beta, q), use_qk_l2norm_in_kernel=False)


def _kda(q, k, v, log_alpha, beta, removal_key):
    return dict(q=q, k=k, v=v, g=_per_key(log_alpha, q, 0.0), beta=_step_size(beta, q), use_qk_l2norm_in_kernel=False)


def _dplr(q, k, v, log_alpha, beta, removal_key):
    """S_t = (diag(α) − (β⊙κ) κᵀ) S + (β⊙k) vᵀ is FLA's S diag(e^{gk}) + b (aᵀ S) + k vᵀ with a = −κ, b = β⊙κ."""
    kappa = k if removal_key is None else removal_key.to(q.dtype)
    b = _per_key(beta, q, 1.0).to(q.dtype)
    return dict(q=q, k=b * k, v=v, a=-kappa, b=b * kappa, gk=_per_key(log_alpha, q, 0.0))


@dataclass(frozen=True)
class FlaKernel:
    """One FLA kernel family: its entry points, the argument map and what FLA refuses (kernels.py reads it).

    dtypes: input dtypes the chunk kernel takes (chunk_delta_rule asserts q is not float32);
    max_head_dim: the largest K it takes (FLA's delta-class state kernels assert K <= 256);
    gated_bwd: its backward runs FLA's gated ``chunk_bwd_dqkwg`` (g given), which FLA refuses on Hopper
    with 3.4.0 <= Triton < 3.7.1 (FLA issue 640) unless its tilelang backend takes the call, which it
    does for ``tilelang_dtypes`` (it needs the chunk states in q's dtype: simple_gla keeps them in
    float32, so only float32 inputs)."""

    chunk: str
    step: str
    args: Callable
    dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    max_head_dim: int | None = None
    gated_bwd: bool = False
    tilelang_dtypes: tuple[torch.dtype, ...] = ()
    paper: str = ""


FLA_KERNELS: dict[str, FlaKernel] = {
    "linear_attn": FlaKernel("chunk_linear_attn", "fused_recurrent_linear_attn", _linear_attn,
                             paper="linear attention (Katharopoulos et al. 2020)"),
    "simple_gla": FlaKernel("chunk_simple_gla", "fused_recurrent_simple_gla", _simple_gla, gated_bwd=True,
                            tilelang_dtypes=(torch.float32,), paper="Mamba2 / simple GLA (scalar decay per token)"),
    "retention": FlaKernel("chunk_simple_gla", "fused_recurrent_simple_gla", _retention,
                           paper="RetNet (fixed decay per head, g_gamma)"),
    "gla": FlaKernel("chunk_gla", "fused_recurrent_gla", _gla, paper="GLA (per-key decay)"),
    "delta_rule": FlaKernel("chunk_delta_rule", "fused_recurrent_delta_rule", _delta_rule,
                            dtypes=(torch.bfloat16, torch.float16), max_head_dim=256, paper="DeltaNet"),
    "gated_delta_rule": FlaKernel("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", _gated_delta_rule,
                                  max_head_dim=256, gated_bwd=True, tilelang_dtypes=HALF + (torch.float32,),
                                  paper="Gated DeltaNet"),
    "kda": FlaKernel("chunk_kda", "fused_recurrent_kda", _kda, max_head_dim=256, paper="Kimi Delta Attention"),
    "dplr": FlaKernel("chunk_dplr_delta_rule", "fused_recurrent_dplr_delta_rule", _dplr, max_head_dim=256,
                      paper="RWKV-7 / generalized delta rule (diagonal plus low rank)"),
}


def fla_ops() -> ModuleType:
    """``fla.ops``, imported on first use (it imports triton)."""
    return importlib.import_module("fla.ops")


def fla_op(name: str, q, k, v, *, log_alpha=None, beta=None, removal_key=None, scale=None, initial_state=None,
           output_final_state=False, chunk_size=None, cu_seqlens=None, step: bool = False, kernels: Any = None):
    """FLA's kernel ``FLA_KERNELS[name]`` called in the op contract (see the module docstring).

    q, k [B, T, H, K]; v [B, T, H, V]; log_alpha [B, T, H] or [B, T, H, K]; beta [B, T, H] (dplr: or
    [B, T, H, K]); removal_key [B, T, H, K] (dplr); initial_state [N, H, K, V]; cu_seqlens [N + 1] (B = 1).
    Returns o [B, T, H, V] (kernel dtype) and the final state [N, H, K, V] (float32) or None."""
    row = FLA_KERNELS[name]
    dt = kernel_dtype(q, k, v)
    q, k, v = q.to(dt), k.to(dt), v.to(dt)
    args = row.args(q, k, v, log_alpha, beta, removal_key)
    kw, pos = (args, ()) if isinstance(args, dict) else args
    kw = dict(kw, scale=q.shape[-1] ** -0.5 if scale is None else float(scale),
              initial_state=None if initial_state is None else initial_state.to(accumulate_dtype(dt)),
              output_final_state=output_final_state)
    if cu_seqlens is not None:
        kw["cu_seqlens"] = cu_seqlens
    fn = getattr(fla_ops() if kernels is None else kernels, row.step if step else row.chunk)
    q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
    o, S = fn(q, k, v, *pos, **kw)
    return o.to(dt), (None if S is None or not output_final_state else S.to(accumulate_dtype(dt)))
