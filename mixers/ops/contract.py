"""Input checks of the functional op contract for matrix-state ops.

One checker for every op whose state is S ∈ R^{K×V} per head (hebbian and delta families):

    q, k: [B, T, H, K]; v: [B, T, H, V]; beta: None or [B, T, H];
    log_alpha: None, [B, T, H] (scalar decay) or, where the op allows it, [B, T, H, K];
    initial_state: None or [B, H, K, V]; scale: None or a real number; chunk_size: None (the op's default) or a positive int.

Errors name the op, the argument, the expected layout with the sizes read from q, and
what was passed.

Dtypes: one rule for every functional op of mixers/ops (and the derived step, memories/derive.py).
Inputs may differ in float dtype, as ``torch.autocast`` on CUDA produces them (q, k float32 after an
L2 norm or RMSNorm, v bfloat16 after a linear or the short convolution, gates either):

    compute dtype   the promotion of ALL float inputs (q, k, v, gates, removal key, initial state,
                    spectral points ...), raised to float32 when it is bf16/fp16: {f32, bf16} -> f32,
                    {bf16} -> f32, {f64, f32} -> f64 (``compute_dtype``). Ops without a state to
                    accumulate (softmax attention: SDPA accumulates in float32 itself) take the
                    promotion as it is, so all-bf16 attention stays bf16 (``accumulate=False``).
    casts           every input is cast to the compute dtype once, at the op's entry
    o               returned in v's dtype (FLA's convention: o is allocated like v)
    final state     returned in the compute dtype

Integer, bool and complex inputs are refused (``check_float``), naming the argument and the
accepted dtypes. The rule itself lives in memories/checks.py (the lowest layer, so the derived
step applies it too) and is re-exported here. The backward passes of the ops' autograd Functions
run with autocast off (``autocast_off``): a ``loss.backward()`` called inside ``torch.autocast``
would otherwise mix bf16 and float32 in place.
"""
from __future__ import annotations

import functools
import numbers

import torch

from assocmem.memories.checks import FLOAT_DTYPES, check_float, compute_dtype

__all__ = ["check_matrix_inputs", "check_chunk_size", "compute_dtype", "check_float", "in_compute_dtype",
           "autocast_off", "FLOAT_DTYPES"]


def in_compute_dtype(op):
    """``op(q, k, v, **kw) -> (o, state)`` under the dtype rule (module docstring), for an op written for
    one dtype: q, k, v and every float tensor among ``kw`` (tuples opened) cast to their compute dtype,
    o returned in v's dtype, the state as the op returns it (in the compute dtype)."""
    @functools.wraps(op)
    def run(q, k, v, **kw):
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_float(name, x, fn=op.__name__)
        cd = compute_dtype(q, k, v, *kw.values())

        def cast(x):
            if isinstance(x, tuple):
                return tuple(map(cast, x))
            return x.to(cd) if torch.is_tensor(x) and x.dtype in FLOAT_DTYPES else x

        o, state = op(q.to(cd), k.to(cd), v.to(cd), **{n: cast(x) for n, x in kw.items()})
        return o.to(v.dtype), state
    return run


def autocast_off(backward):
    """An autograd Function's ``backward(ctx, *grads)`` run with autocast off on the grads' device: it
    computes in the dtypes its forward saved, whether or not the caller's backward sits in autocast."""
    @functools.wraps(backward)
    def run(ctx, *grads):
        device = next((g.device.type for g in grads if isinstance(g, torch.Tensor)), "cpu")
        with torch.autocast(device, enabled=False):
            return backward(ctx, *grads)
    return run


_LAYOUT = {"q": "[B, T, H, K]", "k": "[B, T, H, K]", "v": "[B, T, H, V]", "beta": "[B, T, H]",
           "initial_state": "[B, H, K, V]"}


def _check_tensor(fn: str, name: str, x, rank: int) -> None:
    check_float(name, x, _LAYOUT[name], fn=fn)
    if x.dim() != rank:
        raise ValueError(f"{fn}: {name} must be {_LAYOUT[name]} (rank {rank}), got shape {tuple(x.shape)}")


def _check_log_alpha(fn: str, log_alpha, B: int, T: int, H: int, K: int, per_key: bool, hint: str) -> None:
    if log_alpha is None:
        return
    allowed = [(B, T, H)] + ([(B, T, H, K)] if per_key else [])
    names = "[B, T, H]" + (" or [B, T, H, K]" if per_key else "")
    if not isinstance(log_alpha, torch.Tensor) or log_alpha.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{fn}: log_alpha must be None or a floating tensor {names} (float16, bfloat16, float32 or "
                        f"float64), got {getattr(log_alpha, 'dtype', type(log_alpha).__name__)}")
    if tuple(log_alpha.shape) not in allowed:
        raise ValueError(f"{fn}: log_alpha must be None or {names} = {' or '.join(map(str, allowed))}, "
                         f"got {tuple(log_alpha.shape)}{'' if per_key else hint}")


def check_matrix_inputs(fn: str, q, k, v, log_alpha, beta, scale, initial_state, *,
                        per_key: bool, per_key_hint: str = "") -> torch.dtype:
    """Validate the op contract for op ``fn``; return the compute dtype of q, k, v, log_alpha, beta and
    initial_state (module docstring: their promotion, half raised to float32).

    per_key: whether log_alpha may be [B, T, H, K]; per_key_hint is appended to the error
    when a per-key gate reaches an op that takes only scalar decay (e.g. where to go instead).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(fn, name, x, 4)
    B, T, H, K = q.shape
    V = v.shape[-1]
    if k.shape != q.shape:
        raise ValueError(f"{fn}: k must have the shape of q [B, T, H, K] = {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"{fn}: v must be [B, T, H, V] with B, T, H = {(B, T, H)} as in q, got {tuple(v.shape)}")
    if T == 0:
        raise ValueError(f"{fn}: q, k, v have T = 0 tokens; at least one is required")
    _check_log_alpha(fn, log_alpha, B, T, H, K, per_key, per_key_hint)
    if beta is not None:
        _check_tensor(fn, "beta", beta, 3)
        if tuple(beta.shape) != (B, T, H):
            raise ValueError(f"{fn}: beta must be None or [B, T, H] = {(B, T, H)}, got {tuple(beta.shape)}")
    if initial_state is not None:
        _check_tensor(fn, "initial_state", initial_state, 4)
        if tuple(initial_state.shape) != (B, H, K, V):
            raise ValueError(f"{fn}: initial_state must be [B, H, K, V] = {(B, H, K, V)}, "
                             f"got {tuple(initial_state.shape)}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"{fn}: scale must be a number or None, got {type(scale).__name__}")
    return compute_dtype(q, k, v, log_alpha, beta, initial_state)


def check_chunk_size(fn: str, chunk_size, default: int) -> int:
    """chunk_size must be None (then ``default``, the op's own choice) or a positive int (not a bool)."""
    if chunk_size is None:
        return default
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"{fn}: chunk_size must be None (the op's default) or a positive int, got {chunk_size!r}")
    return chunk_size
