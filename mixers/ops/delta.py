"""Delta-rule family: DeltaNet, Gated DeltaNet, Longhorn, the "joint" GD variant and KDA.

Per head the state is S ∈ R^{K×V}; the read-out comes after the write,
o_t = S_tᵀ (scale · q_t) (DeltaNet: Schlag et al. 2021, Yang et al. 2024; Gated DeltaNet:
Yang et al. 2025; Longhorn: Liu et al. 2024; KDA: Kimi Team 2025). With α_t = exp(log_alpha_t):

    DeltaNet         S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ
    Gated DeltaNet   S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ      (retain, then one GD step)
    Longhorn         DeltaNet (or Gated DeltaNet) with β_t → ε_t = β_t / (1 + β_t ‖k_t‖²):
                     the exact proximal (implicit) step argmin_S ½‖Sᵀk − v‖² + 1/(2β)‖S − S_{t−1}‖²_F
    joint            S_t = (diag(α_t) − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ    (one GD step on ℓ2 + ℓ2-decay
                     taken at S_{t−1}; α_t scalar per head or one factor per key row of S)
    KDA              S_t = (I − β_t k_t k_tᵀ) diag(α_t) S_{t−1} + β_t k_t v_tᵀ (Kimi Delta Attention: Gated
                     DeltaNet with one decay per key row, retain then GD; NOT the joint variant)

The delta rule reads "erase what S predicts for k_t, write v_t": the correction
is u_t = β_t (v_t − S̄ᵀ k_t) with S̄ = α_t S_{t−1} (Gated DeltaNet) or S̄ = S_{t−1}
(joint), then S_t = diag(α_t) S_{t−1} + k_t u_tᵀ (KDA: S̄ = diag(α_t) S_{t−1}).

The joint variant differs from Gated DeltaNet only in the state its erase reads
(S_{t−1} instead of α_t S_{t−1}), so both run through the same chunk form, which
takes the erase's decay as e^{G_{t−1}} (joint) or e^{G_t} (``delta_chunk.py``). It is
finite for any α ∈ [0, 1] (rewriting it as a gated delta rule with erase strength β/α
would overflow once α < e^{−88} in float32). With per-key α it is a
diagonal-plus-rank-one transition (RWKV-7-like) and uses the per-key chunk
form in ``delta_chunk.py``.

Forms, one contract (checked by contract.py):

    o, S = <form>(q, k, v, *, log_alpha=None, beta=None, scale=None,
                  initial_state=None, output_final_state=False[, chunk_size=None])
    q, k: [B, T, H, K]; v: [B, T, H, V]; beta: None (= 1) or [B, T, H];
    log_alpha: None (α = 1) or [B, T, H]; the joint variant and KDA also take [B, T, H, K];
    initial_state: None (zeros) or [B, H, K, V]; scale: K**-0.5 if None;
    chunk_size: None → ``delta_chunk.default_chunk_size(K)`` (32 at K = 64);
    chunk forms also take compile: bool = False (the same groups fused by torch.compile, ``compiled.py``).

* ``recurrent_*`` loop over time, numbered steps following the equations above.
* ``chunk_*`` use the WY/UT representation (``delta_chunk.py``).

Dtypes (contract.py): the inputs may differ in float dtype; all are cast once to the compute
dtype, their promotion with bf16/fp16 raised to float32 (so the state accumulates in float32 at
least). ``o`` is returned in v's dtype, the final state in the compute dtype.
"""
from __future__ import annotations

import torch

from .contract import check_chunk_size, check_matrix_inputs
from .delta_chunk import DeltaInputs, chunk_key_decay, chunk_scalar_decay, default_chunk_size
from .isolation import first_non_finite, keep_finite_prefix, spread_possible

__all__ = [
    "recurrent_delta_rule", "recurrent_longhorn", "recurrent_delta_rule_joint",
    "chunk_delta_rule", "chunk_longhorn", "chunk_delta_rule_joint",
    "recurrent_kda", "chunk_kda",
]


def _prepare(fn: str, q, k, v, log_alpha, beta, scale, initial_state, *, per_key: bool) -> DeltaInputs:
    """Validate the op contract (``contract.py``) and return the inputs in the compute dtype."""
    cd = check_matrix_inputs(fn, q, k, v, log_alpha, beta, scale, initial_state, per_key=per_key,
                             per_key_hint=" (per-key decay [B, T, H, K]: use the joint variant or KDA)")
    B, T, H, K = q.shape
    V = v.shape[-1]
    return DeltaInputs(
        q=q.to(cd), k=k.to(cd), v=v.to(cd),
        log_alpha=None if log_alpha is None else log_alpha.to(cd),
        beta=q.new_ones(B, T, H, dtype=cd) if beta is None else beta.to(cd),
        state=q.new_zeros(B, H, K, V, dtype=cd) if initial_state is None else initial_state.to(cd),
        scale=K ** -0.5 if scale is None else float(scale),
    )


def _finish(o: torch.Tensor, S: torch.Tensor, dtype: torch.dtype, output_final_state: bool):
    return o.to(dtype), (S if output_final_state else None)


def _prefix(x: DeltaInputs, p: int) -> DeltaInputs:
    """The inputs at positions < p (same initial state)."""
    head = lambda t: None if t is None else t[:, :p]  # noqa: E731
    return x._replace(q=head(x.q), k=head(x.k), v=head(x.v), log_alpha=head(x.log_alpha), beta=head(x.beta))


def _isolated(form, x: DeltaInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """``form(x)`` -> (o, S) for a chunk form, with a non-finite input at p kept from reaching o_{<p}
    (``isolation.py``: recomputed from the inputs before p when the final state is not finite).
    An empty batch (B = 0) returns empty outputs and the (empty) initial state."""
    if x.q.shape[0] == 0:
        return x.v.new_empty(*x.v.shape), x.state
    o, S = form(x)
    if spread_possible(S) and not spread_possible(x.state):
        p = first_non_finite(x.q, x.k, x.v, x.log_alpha, x.beta)
        o = keep_finite_prefix(o, p, lambda p: form(_prefix(x, p))[0])
    return o, S


def _longhorn_step_size(x: DeltaInputs) -> DeltaInputs:
    """Longhorn's exact proximal step: ε_t = β_t / (1 + β_t ‖k_t‖²)."""
    return x._replace(beta=x.beta / (1 + x.beta * (x.k * x.k).sum(-1)))  # (B, T, H)


# --------------------------------------------------------------------------------------------
# Hand-written recurrences
# --------------------------------------------------------------------------------------------

def _delta_recurrence(x: DeltaInputs, *, joint: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One token at a time. joint=False: Gated DeltaNet (retain, then GD); joint=True: one GD step at S_{t−1}."""
    S = x.state  # (B, H, K, V)
    outs = []
    for t in range(x.q.shape[1]):
        k_t, v_t, beta_t = x.k[:, t], x.v[:, t], x.beta[:, t, :, None]  # (B, H, K), (B, H, V), (B, H, 1)
        alpha = 1.0
        if x.log_alpha is not None:  # (B, H, 1, 1) scalar per head or (B, H, K, 1) per key row of S
            a_t = x.log_alpha[:, t].exp()
            alpha = a_t[..., None, None] if a_t.dim() == 2 else a_t[..., None]
        # 1. the state the erase reads: S̄ = α_t S_{t−1} (Gated DeltaNet) or S_{t−1} (joint)
        S_read = S if joint else alpha * S
        # 2. correction u_t = β_t (v_t − S̄ᵀ k_t)
        u_t = beta_t * (v_t - torch.einsum("bhkv,bhk->bhv", S_read, k_t))  # (B, H, V)
        # 3. write: S_t = diag(α_t) S_{t−1} + k_t u_tᵀ
        S = alpha * S + k_t[..., :, None] * u_t[..., None, :]  # (B, H, K, V)
        # 4. read after the write: o_t = S_tᵀ (scale · q_t)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, x.scale * x.q[:, t]))  # (B, H, V)
    return torch.stack(outs, dim=1), S  # (B, T, H, V), (B, H, K, V)


def recurrent_delta_rule(q, k, v, *, log_alpha=None, beta=None, scale=None,
                         initial_state=None, output_final_state=False):
    """DeltaNet (log_alpha None) or Gated DeltaNet (log_alpha [B, T, H]), token by token.

    S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,  o_t = S_tᵀ (scale · q_t).
    Shapes as in the module docstring. Returns o [B, T, H, V] (dtype of v) and
    S [B, H, K, V] if output_final_state else None.
    """
    x = _prepare("recurrent_delta_rule", q, k, v, log_alpha, beta, scale, initial_state, per_key=False)
    return _finish(*_delta_recurrence(x, joint=False), v.dtype, output_final_state)


def recurrent_longhorn(q, k, v, *, log_alpha=None, beta=None, scale=None,
                       initial_state=None, output_final_state=False):
    """Longhorn (exact implicit step), token by token: the delta rule with ε_t = β_t / (1 + β_t ‖k_t‖²).

    With log_alpha [B, T, H] the state is decayed first (retain, then the implicit step).
    """
    x = _prepare("recurrent_longhorn", q, k, v, log_alpha, beta, scale, initial_state, per_key=False)
    return _finish(*_delta_recurrence(_longhorn_step_size(x), joint=False), v.dtype, output_final_state)


def recurrent_delta_rule_joint(q, k, v, *, log_alpha=None, beta=None, scale=None,
                               initial_state=None, output_final_state=False):
    """One GD step on ℓ2 + ℓ2-decay at S_{t−1}, token by token.

    S_t = (diag(α_t) − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ, log_alpha None, [B, T, H] or [B, T, H, K].
    """
    x = _prepare("recurrent_delta_rule_joint", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    return _finish(*_delta_recurrence(x, joint=True), v.dtype, output_final_state)


# --------------------------------------------------------------------------------------------
# Chunkwise forms (WY/UT representation, delta_chunk.py)
# --------------------------------------------------------------------------------------------

def chunk_delta_rule(q, k, v, *, log_alpha=None, beta=None, scale=None,
                     initial_state=None, output_final_state=False, chunk_size=None, compile=False):
    """Chunkwise DeltaNet / Gated DeltaNet; same semantics as ``recurrent_delta_rule``.

    T need not be a multiple of chunk_size (padded internally with α = 1, β = 0).
    """
    x = _prepare("chunk_delta_rule", q, k, v, log_alpha, beta, scale, initial_state, per_key=False)
    C = check_chunk_size("chunk_delta_rule", chunk_size, default_chunk_size(x.q.shape[-1]))
    return _finish(*_isolated(lambda x: chunk_scalar_decay(x, C, compile=compile), x), v.dtype, output_final_state)


def chunk_longhorn(q, k, v, *, log_alpha=None, beta=None, scale=None,
                   initial_state=None, output_final_state=False, chunk_size=None, compile=False):
    """Chunkwise Longhorn: ``chunk_delta_rule`` with ε_t = β_t / (1 + β_t ‖k_t‖²)."""
    x = _prepare("chunk_longhorn", q, k, v, log_alpha, beta, scale, initial_state, per_key=False)
    C = check_chunk_size("chunk_longhorn", chunk_size, default_chunk_size(x.q.shape[-1]))
    return _finish(*_isolated(lambda x: chunk_scalar_decay(x, C, compile=compile), _longhorn_step_size(x)), v.dtype,
                   output_final_state)


def chunk_delta_rule_joint(q, k, v, *, log_alpha=None, beta=None, scale=None,
                           initial_state=None, output_final_state=False, chunk_size=None, compile=False):
    """Chunkwise joint variant; same semantics as ``recurrent_delta_rule_joint``.

    Scalar (or no) decay: ``chunk_scalar_decay`` with the erase reading S_{t−1}; per-key decay:
    the diagonal-plus-rank-one chunk form ``chunk_key_decay``, likewise.
    """
    x = _prepare("chunk_delta_rule_joint", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    C = check_chunk_size("chunk_delta_rule_joint", chunk_size, default_chunk_size(x.q.shape[-1]))
    form = chunk_key_decay if x.log_alpha is not None and x.log_alpha.dim() == 4 else chunk_scalar_decay
    return _finish(*_isolated(lambda x: form(x, C, erase_reads_decayed=False, compile=compile), x), v.dtype,
                   output_final_state)


# --------------------------------------------------------------------------------------------
# KDA: Gated DeltaNet with per-key decay (Kimi Delta Attention)
# --------------------------------------------------------------------------------------------

def recurrent_kda(q, k, v, *, log_alpha=None, beta=None, scale=None,
                  initial_state=None, output_final_state=False):
    """KDA token by token: S_t = (I − β_t k_t k_tᵀ) diag(α_t) S_{t−1} + β_t k_t v_tᵀ.

    log_alpha: None, [B, T, H] (then exactly Gated DeltaNet) or [B, T, H, K].
    """
    x = _prepare("recurrent_kda", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    return _finish(*_delta_recurrence(x, joint=False), v.dtype, output_final_state)


def chunk_kda(q, k, v, *, log_alpha=None, beta=None, scale=None,
              initial_state=None, output_final_state=False, chunk_size=None, compile=False):
    """Chunkwise KDA; same semantics as ``recurrent_kda`` (per-key decay: ``chunk_key_decay``)."""
    x = _prepare("chunk_kda", q, k, v, log_alpha, beta, scale, initial_state, per_key=True)
    C = check_chunk_size("chunk_kda", chunk_size, default_chunk_size(x.q.shape[-1]))
    form = chunk_key_decay if x.log_alpha is not None and x.log_alpha.dim() == 4 else chunk_scalar_decay
    return _finish(*_isolated(lambda x: form(x, C, erase_reads_decayed=True, compile=compile), x), v.dtype,
                   output_final_state)
