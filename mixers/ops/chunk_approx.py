"""chunk_approx: the TTT / Titans mini-batch approximation, opt-in only.

APPROXIMATE BY CONSTRUCTION. Within each chunk of C tokens every gradient is
taken at the chunk-start state S_c instead of the running state:

    g_τ = ∇ℓ(S_c; k_τ, v_τ)                       (all τ in the chunk at once: parallel;
                                                   RetainThenGD: at the retained α_c S_c)
    S_τ = retain(S_{τ−1}) − η_τ g_τ               (GD / RetainThenGD)
    m_τ = η_τ m_{τ−1} − θ_τ g_τ;  S_τ = retain(S_{τ−1}) + m_τ   (Momentum)
    o_τ = f_{S_τ}(scale·q_τ)

With C = 1 it is the exact derived recurrence. ``lower`` never picks it by
default; ask for form="chunk_approx" explicitly. Dtypes as every op (contract.py): the inputs
compute in their promotion with bf16/fp16 raised to float32, o comes back in v's dtype.
"""
from __future__ import annotations

import torch
from torch.func import grad, vmap

from assocmem.memories import GD, KL, L1, Momentum, RemoveReplace, RetainThenGD
from assocmem.memories.checks import check_inputs, compute_dtype, gate_needs


def _check_supported(spec) -> None:
    o = spec.optimizer
    if isinstance(spec.retention, (KL, L1)) or not isinstance(o, (GD, RetainThenGD, Momentum)):
        raise ValueError(
            f"chunk_approx supports the gd, retain_then_gd and momentum optimizers with none/l2_decay "
            f"retention; got optimizer {o.kind!r}, retention {spec.retention.kind!r}"
        )
    if getattr(o, "steps", 1) != 1 or getattr(o, "rate", "scalar") != "scalar" or isinstance(spec.bias, RemoveReplace):
        raise ValueError(
            f"chunk_approx takes one step per token with one rate per head on a one-key bias; got "
            f"optimizer.steps={getattr(o, 'steps', 1)}, optimizer.rate={getattr(o, 'rate', 'scalar')!r}, "
            f"bias {spec.bias.kind!r} (use the exact forms: scan or recurrent)"
        )


def _chunk_grads(spec, state, k, v):
    """g_τ for every token of a chunk at the chunk-start state. k: [B, C, H, K] -> leaves [B, C, H, ...]."""
    def one(s, kk, vv):
        return grad(lambda st: spec.bias.loss(spec.memory.predict(st, kk), vv))(s)

    per_head = vmap(one, in_dims=(0, 0, 0))  # over H
    per_token = vmap(per_head, in_dims=(None, 0, 0))  # over C (state shared)
    return vmap(per_token, in_dims=(0, 0, 0))(state, k, v)  # over B


def chunk_approx_scan(spec, q, k, v, *, log_alpha=None, beta=None, eta=None, scale=None,
                      initial_state=None, output_final_state=False, chunk_size=16):
    """Mini-batch (chunk-start gradient) form of a scan-class spec; see the module docstring."""
    _check_supported(spec)
    check_inputs(gate_needs(spec), q, k, v, log_alpha=log_alpha, beta=beta, eta=eta, theta=None,
                 weights=None, initial_state=initial_state)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    out_dtype, cd = v.dtype, compute_dtype(q, k, v, log_alpha, beta, eta, initial_state)
    q, k, v, log_alpha, beta, eta = (None if x is None else x.to(cd) for x in (q, k, v, log_alpha, beta, eta))
    if initial_state is not None:
        initial_state = (initial_state.to(cd) if torch.is_tensor(initial_state)
                         else tuple(s.to(cd) for s in initial_state))
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    mem0 = spec.memory.init_state(K, V, q)
    n = len(mem0)
    mom = isinstance(spec.optimizer, Momentum)
    if initial_state is None:
        state = tuple(m.expand(B, H, *m.shape).clone() for m in mem0)
        moms = tuple(torch.zeros_like(s) for s in state) if mom else ()
    else:
        full = (initial_state,) if torch.is_tensor(initial_state) else tuple(initial_state)
        state, moms = full[:n], full[n:]
    lr = spec.optimizer.lr * (q.new_ones(B, T, H) if beta is None else beta)
    alpha = None if log_alpha is None else log_alpha.exp()
    eta = q.new_full((B, T, H), getattr(spec.optimizer, "eta", 0.0)) if eta is None else eta
    read = vmap(vmap(spec.memory.predict))
    outs = []
    for c0 in range(0, T, chunk_size):
        c1 = min(c0 + chunk_size, T)
        at = state  # RetainThenGD differentiates at the retained chunk-start state (exact for C = 1)
        if isinstance(spec.optimizer, RetainThenGD) and alpha is not None:
            at = tuple(_decay(s, alpha[:, c0]) for s in state)
        grads = _chunk_grads(spec, at, k[:, c0:c1], v[:, c0:c1])
        for j, t in enumerate(range(c0, c1)):
            g = tuple(gi[:, j] for gi in grads)
            kept = state if alpha is None else tuple(_decay(s, alpha[:, t]) for s in state)
            step = tuple(-lr[:, t].reshape(B, H, *[1] * (gi.dim() - 2)) * gi for gi in g)
            if mom:
                moms = tuple(eta[:, t].reshape(B, H, *[1] * (m.dim() - 2)) * m + d for m, d in zip(moms, step))
                step = moms
            state = tuple(s + d for s, d in zip(kept, step))
            outs.append(read(state, scale * q[:, t]))
    o = torch.stack(outs, dim=1).to(out_dtype)
    final = state + moms
    return o, ((final[0] if len(final) == 1 else final) if output_final_state else None)


def _decay(s: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """α [B, H] or [B, H, K] (per key row) applied to a state leaf [B, H, ...]."""
    return alpha.reshape(*alpha.shape, *[1] * (s.dim() - alpha.dim())) * s
