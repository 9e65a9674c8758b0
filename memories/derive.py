"""derive(spec): the per-token update of a mixer, computed with autograd.

For every token t and every (batch, head), the optimizer is applied to

    ℓ(M; k_t, v_t) + R(M, M_{t−1})                        (eq. 2.43)

with gradients from ``torch.func.grad``, vmapped over batch × heads and looped
over time; the read-out o_t = f_{M_t}(scale·q_t) follows the write. No closed
form is assumed, so the result is the semantic ground truth that every
hand-written and fast form is checked against. It is slow by design and runs
in the compute dtype of its inputs (``checks.compute_dtype``, the rule of every op: their
promotion, bf16/fp16 raised to float32; ``verify`` gives it float64): o comes back in v's dtype,
the state in the compute dtype.

The returned RecurrentStep has the project's op contract:

    o, S = step(q, k, v, *, log_alpha=None, beta=None, eta=None, theta=None, weights=None,
                removal_key=None, scale=None, initial_state=None, output_final_state=False)
    q, k: [B, T, H, K]   v: [B, T, H, V]   log_alpha: [B, T, H] or [B, T, H, K]
    beta: [B, T, H] (η_t = lr·β_t, or the contribution p_t of a closed form);
          [B, T, H, K] with GD(rate="key")
    eta: [B, T, H] momentum decay (Momentum only)
    removal_key: [B, T, H, K] the removal key κ of the remove_replace bias (only there)
    theta, weights: [H, D, M] spectral points and integration weights (Spectral only)
    state: a tensor [B, H, K, V] for a matrix memory, else a tuple (see memory docs)
"""
from __future__ import annotations

import torch
from torch.func import grad, vmap

from .algebra import AxesLike, algebra_class, check_axes, window_of
from .bias import NadarayaWatson
from .checks import GateNeeds, check_inputs, compute_dtype, gate_needs
from .describe import describe
from .memory import NonParametric, Spectral, State
from .bias import RemoveReplace
from .optimizer import ClosedForm, Momentum, TokenContext, state_dot
from .retention import KL, L1, Proximal

__all__ = ["derive", "RecurrentStep"]


def derive(spec: AxesLike) -> "RecurrentStep":
    """Derive the exact per-token recurrence of ``spec`` (a MixerSpec or any
    object with ``memory``, ``bias``, ``retention`` and ``optimizer``)."""
    check_axes(spec)
    return RecurrentStep(spec)


class RecurrentStep:
    """The derived recurrence of one spec; see the module docstring."""

    def __init__(self, spec: AxesLike, *, compile: bool = False):
        self.spec = spec
        self.cls = algebra_class(spec)
        self.needs: GateNeeds = gate_needs(spec)
        self.compile = compile
        self._token = None  # the fused (write, read) token function, built on first call

    def describe(self) -> str:
        """The closed form when the algebra is recognised, else the generic gradient step written out from
        the axes ('generic gradient step: ...', describe.py ``composed``)."""
        return describe(self.spec)

    def __repr__(self) -> str:
        return f"RecurrentStep({self.cls}: {self.describe()})"

    def __call__(self, q, k, v, *, log_alpha=None, beta=None, eta=None, theta=None, weights=None,
                 removal_key=None, scale=None, initial_state=None, output_final_state=False):
        check_inputs(self.needs, q, k, v, log_alpha=log_alpha, beta=beta, eta=eta, theta=theta,
                     weights=weights, initial_state=initial_state, removal_key=removal_key)
        out_dtype, cd = v.dtype, compute_dtype(q, k, v, log_alpha, beta, eta, theta, weights, removal_key,
                                               initial_state)
        q, k, v, log_alpha, beta, eta, theta, weights, removal_key = (
            None if x is None else x.to(cd) for x in (q, k, v, log_alpha, beta, eta, theta, weights, removal_key))
        if initial_state is not None:
            initial_state = initial_state.to(cd) if torch.is_tensor(initial_state) else \
                tuple(s.to(cd) for s in initial_state)
        width = q.shape[3]  # K, or D for a spectral query [B, T, H, D, M, 2]
        scale = width ** -0.5 if scale is None else scale
        if isinstance(self.spec.memory, Spectral):
            o, S = _run_spectral(self.spec, q, k, v, beta, theta, weights, scale, initial_state)
        elif isinstance(self.spec.memory, NonParametric):
            o, S = _run_nonparametric(self.spec, q, k, v, scale, initial_state)
        else:
            o, S = _run_parametric(self.spec, self._token_fn(q, v), q, k, v, log_alpha, beta, eta, scale,
                                   initial_state, k if removal_key is None else removal_key)
        return o.to(out_dtype), (S if output_final_state else None)

    def _token_fn(self, q, v):
        """vmap(batch) ∘ vmap(heads) of one token's write + read; torch.compile'd for the scan form."""
        if self._token is None:
            n_mem = len(self.spec.memory.init_state(q.shape[-1], v.shape[-1], q))
            fused = vmap(vmap(_token_write_read(self.spec, n_mem)))
            self._token = (torch.compile(fused, dynamic=False) if self.compile else fused, n_mem)
        return self._token


# ---------------------------------------------------------------- parametric


def _initial(spec, B, H, K, V, like, initial_state) -> State:
    """The per-(batch, head) state pytree, each leaf [B, H, ...]."""
    mom = isinstance(spec.optimizer, Momentum)
    if initial_state is not None:
        return (initial_state,) if torch.is_tensor(initial_state) else tuple(initial_state)
    mem = spec.memory.init_state(K, V, like)
    if isinstance(spec.retention, KL):
        mem = tuple(torch.full_like(m, 1.0 / m.shape[-1]) for m in mem)
    mem = tuple(m.expand(B, H, *m.shape).clone() for m in mem)
    return mem + tuple(torch.zeros_like(m) for m in mem) if mom else mem


def _token_update(spec, n_mem: int):
    """Per-head update (state, k, v, alpha, lr, eta, removal key) -> new state, for vmap."""
    memory, bias, retention, opt = spec.memory, spec.bias, spec.retention, spec.optimizer
    two_keys = isinstance(bias, RemoveReplace)

    def update(state, k, v, alpha, lr, eta, kappa):
        def loss(s):
            if two_keys:  # ℓ(M; κ, k, v) reads the memory at the removal key too
                return bias.loss(memory.predict(s[:n_mem], k), v, memory.predict(s[:n_mem], kappa))
            return bias.loss(memory.predict(s[:n_mem], k), v)

        if isinstance(retention, KL):  # mirror descent on the simplex of each key row
            g = grad(loss)(state)
            return tuple(torch.softmax(alpha * torch.log(s) - lr * gi, dim=-1) for s, gi in zip(state, g))

        def penalty(s, prev):
            return retention.penalty(s, prev, alpha, lr)

        shrink = (lambda change: retention.shrink(change, lr)) if isinstance(retention, L1) else None
        ctx = TokenContext(loss, penalty, lr, eta, proximal=isinstance(retention, Proximal), shrink=shrink)
        return opt.update(ctx, state)

    return update


def _token_write_read(spec, n_mem: int):
    """One head, one token: the optimizer's write, then the read o = f_{M_t}(scale·q)."""
    update = _token_update(spec, n_mem)

    def token(state, q, k, v, alpha, lr, eta, kappa, scale):
        state = update(state, k, v, alpha, lr, eta, kappa)
        return state, spec.memory.predict(state[:n_mem], scale * q)

    return token


def _run_parametric(spec, token, q, k, v, log_alpha, beta, eta, scale, initial_state, kappa):
    """Loop over time; per token, the vmapped (batch × heads) write and read."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    state = _initial(spec, B, H, K, V, q, initial_state)
    step, n_mem = token
    ones = q.new_ones(B, T, H)
    lr = spec.optimizer.lr * (ones if beta is None else beta)
    alpha = ones if log_alpha is None else torch.exp(log_alpha)
    mom = eta if eta is not None else ones * getattr(spec.optimizer, "eta", 0.0)
    sc = q.new_full((B, H), scale)
    outs = []
    for t in range(T):
        state, o_t = step(state, q[:, t], k[:, t], v[:, t], alpha[:, t], lr[:, t], mom[:, t], kappa[:, t], sc)
        outs.append(o_t)  # (B, H, V)
    o = torch.stack(outs, dim=1)  # (B, T, H, V)
    return o, (state[0] if len(state) == 1 else state)


# ---------------------------------------------------------------- spectral


def _spectral_token(bias):
    """Closed-form write of one token into the sufficient statistics (den, num),
    with the linear term and the curvature read off the bias by autograd."""

    def write(den, num, u, v, p, theta):
        zero = torch.zeros_like(num)
        loss = lambda S: bias.loss(S, u, v, theta)  # noqa: E731
        g0 = grad(loss)(zero)  # = −v e^{iφ}
        curv = state_dot((grad(loss)(torch.ones_like(num)) - g0,), (torch.ones_like(num),)) / num.numel()
        return den + p * curv, num - p * g0

    return write


def _spectral_read(den, num, q, w, scale, floor):
    """o = scale Σ_m w · S · conj(q), S = num / max(den, floor). [D, M, 2] -> [D, 2]."""
    S = num / torch.clamp(den, min=floor)
    s_re, s_im, q_re, q_im = S[..., 0], S[..., 1], q[..., 0], q[..., 1]
    o_re = (w * (s_re * q_re + s_im * q_im)).sum(-1)
    o_im = (w * (s_im * q_re - s_re * q_im)).sum(-1)
    return scale * torch.stack((o_re, o_im), dim=-1)


def _run_spectral(spec, q, k, v, beta, theta, weights, scale, initial_state):
    B, T, H, D, M, _ = q.shape
    floor = spec.memory.den_floor
    if initial_state is None:
        den, num = q.new_zeros(B, H), q.new_zeros(B, H, D, M, 2)
    else:
        den, num = initial_state
    p = q.new_ones(B, T, H) if beta is None else beta
    head = (0, 0, 0, 0, 0, 0)  # vmap over heads: theta [H, D, M] is per head
    write = vmap(vmap(_spectral_token(spec.bias), in_dims=head), in_dims=(0, 0, 0, 0, 0, None))
    read = vmap(vmap(lambda d, n, qq, w: _spectral_read(d, n, qq, w, scale, floor),
                     in_dims=(0, 0, 0, 0)), in_dims=(0, 0, 0, None))
    outs = []
    for t in range(T):
        den, num = write(den, num, k[:, t], v[:, t], p[:, t], theta)
        outs.append(read(den, num, q[:, t], weights))  # (B, H, D, 2)
    return torch.stack(outs, dim=1), (den, num)


# ---------------------------------------------------------------- nonparametric


def _nw_read(bias: NadarayaWatson):
    """Closed-form argmin over the cache: one Newton step from o = 0 (exact: quadratic)."""

    def read(q, keys, values, mask, scale):
        logits = torch.where(mask, scale * (keys @ q), torch.finfo(q.dtype).min)
        w = torch.exp(logits - logits.max()) * mask  # (N,) unnormalised Nadaraya–Watson weights
        obj = lambda o: bias.objective(o, values, w)  # noqa: E731
        zero = values.new_zeros(values.shape[-1])
        g0 = grad(obj)(zero)
        curv = ((grad(obj)(torch.ones_like(zero)) - g0).sum()) / zero.numel()
        return -g0 / curv

    return read


def _run_nonparametric(spec, q, k, v, scale, initial_state):
    B, T, H, K = q.shape
    keys, values = k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, K), (B, H, T, V)
    if initial_state is not None:
        keys = torch.cat((initial_state[0], keys), dim=2)
        values = torch.cat((initial_state[1], values), dim=2)
    n0 = keys.shape[2] - T
    window = window_of(spec)
    pos = torch.arange(keys.shape[2], device=q.device)
    read = vmap(vmap(_nw_read(spec.bias), in_dims=(0, 0, 0, None, None)), in_dims=(0, 0, 0, None, None))
    outs = []
    for t in range(T):
        now = n0 + t
        mask = pos <= now
        if window is not None:
            mask = mask & (pos > now - window)
        outs.append(read(q[:, t], keys, values, mask, scale))  # (B, H, V)
    keep = keys.shape[2] if window is None else min(window, keys.shape[2])
    return torch.stack(outs, dim=1), (keys[:, :, -keep:], values[:, :, -keep:])
