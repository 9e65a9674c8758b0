"""FLA's Triton kernels as peers of `assocmem bench mixers --device cuda` (``make bench-gpu``).

On a CUDA machine with ``flash-linear-attention`` (and so triton) installed, the compiled chunk
forms (inductor → Triton) and the eager ones are timed against FLA's own chunked Triton kernels:

    gated_deltanet  fla.ops.gated_delta_rule.chunk_gated_delta_rule(q, k, v, g=log α, beta)
    mamba2          fla.ops.simple_gla.chunk_simple_gla(q, k, Δ ⊙ v, g=log α)   (β = Δ folded into v)
    gla             fla.ops.gla.chunk_gla(q, k, v, g=log α)                      (per-key decay)

Each adapter maps the op contract (q, k, v [B, T, H, ·], log_alpha, beta, scale, initial_state
[B, H, K, V]) onto FLA's keywords, as ``mixers/external.py`` does for FLA's naive files. Triton
must never be installed on the CPU machines this project is developed on, so these adapters are
not run by the test suite: they are imported only when CUDA is available and ``fla.ops`` imports.
"""
from __future__ import annotations

import importlib
from typing import Callable

import torch

__all__ = ["triton_references"]


def _fold_beta(v: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
    return v if beta is None else v * beta[..., None]


def triton_references(family: str) -> dict[str, Callable]:
    """name -> op-contract adapter of FLA's Triton kernel for ``family`` ({} without CUDA or FLA)."""
    if not torch.cuda.is_available():
        return {}
    try:
        ops = importlib.import_module("fla.ops")
    except ImportError:
        return {}
    if family == "gated_deltanet":
        def gdn(q, k, v, *, log_alpha, beta, scale=None, initial_state=None, output_final_state=False):
            return ops.chunk_gated_delta_rule(q, k, v, g=log_alpha, beta=beta, scale=scale,
                                              initial_state=initial_state, output_final_state=output_final_state)
        return {"fla-triton:chunk_gated_delta_rule": gdn}
    if family == "mamba2":
        def ssd(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False):
            return ops.chunk_simple_gla(q, k, _fold_beta(v, beta), g=log_alpha, scale=scale,
                                        initial_state=initial_state, output_final_state=output_final_state)
        return {"fla-triton:chunk_simple_gla": ssd}
    if family == "gla":
        def gla(q, k, v, *, log_alpha, beta=None, scale=None, initial_state=None, output_final_state=False):
            return ops.chunk_gla(q, k, _fold_beta(v, beta), g=log_alpha, scale=scale,
                                 initial_state=initial_state, output_final_state=output_final_state)
        return {"fla-triton:chunk_gla": gla}
    return {}
