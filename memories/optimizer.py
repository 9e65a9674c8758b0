"""Memory optimizers: how the per-token argmin is solved (thesis §2.4.4).

Each optimizer's ``update(ctx, state)`` maps the previous per-head state (a
tuple of tensors) to the new one, using only ``ctx.loss`` (the attentional
bias at this token as a function of the state), ``ctx.penalty`` (the
retention term) and, for a non-smooth retention, ``ctx.prox`` (its proximal
map). Gradients and Hessian-vector products come from torch.func, so the same
code serves every memory and bias. η_t = lr · β_t is the per-token learning
rate: a scalar per head, or one per key row of S (``GD(rate="key")``).

Recurrent depth (thesis §5.2, eq. 5.1): ``steps: K`` iterates the optimizer's
write K times per token before the read, M_t^{k+1} = f(M_t^k, x_t) with
M_t^0 = M_{t−1}; ``RetainThenGD`` and ``Implicit`` apply the retention once and
then take K steps on the bias, ``GD`` takes K steps on ℓ + R(·, M_{t−1}).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from pydantic import Field
from torch.func import grad, jvp

from .memory import State, Axis


@dataclass
class TokenContext:
    """What an optimizer sees at one token of one head."""

    loss: Callable[[State], torch.Tensor]  # ℓ(M; k_t, v_t)
    penalty: Callable[[State, State], torch.Tensor]  # R(M, M_prev)
    lr: torch.Tensor  # η_t, scalar
    eta: torch.Tensor | None  # momentum decay (Momentum only)
    proximal: bool = False  # retention is a proximal term: Implicit adds R(M, M') to its objective
    shrink: Callable[[State], State] | None = None  # non-smooth R: its prox on the change ΔM = M − M_{t−1}


def rows(a, x: torch.Tensor):
    """A scalar or a per-key-row factor a [K] shaped to multiply x [K, ...] row by row."""
    if not torch.is_tensor(a) or a.dim() == 0:
        return a
    return a.reshape(a.shape + (1,) * (x.dim() - a.dim()))


def _axpy(a, x: State, y: State) -> State:
    return tuple(yi + rows(a, xi) * xi for xi, yi in zip(x, y))


STEPS_DOC = "recurrent depth K (thesis eq. 5.1): writes per token before the read; 1 = the published single step"


def state_dot(x: State, y: State) -> torch.Tensor:
    """⟨x, y⟩ summed over every tensor of two states of the same memory."""
    return sum((xi * yi).sum() for xi, yi in zip(x, y))


def retain(ctx: TokenContext, state: State) -> State:
    """One GD step on R alone at M_{t−1}: α_t M for L2 decay, identity for R ≡ const."""
    g = grad(lambda s: ctx.penalty(s, state))(state)
    return _axpy(-ctx.lr, g, state)


class GD(Axis):
    """One gradient step on ℓ + R taken at M_{t−1} (eq. 2.58):

        M_t = M_{t−1} − η_t ∇[ℓ + R](M_{t−1})

    ``steps: K`` repeats it K times, always with R anchored at M_{t−1} (eq. 5.1). A non-smooth
    retention (ℓ1) is taken by its proximal map instead of its gradient (one proximal-gradient
    step): M ← prox_{η R(·, M_{t−1})}(M − η ∇ℓ(M)). ``rate="key"``: η_t is one step size per key
    row of S (diag(η_t) preconditions the gradient; RWKV-7's in-context learning rate).
    """

    kind: Literal["gd"] = "gd"
    lr: float = Field(1.0, gt=0.0, description="base learning rate; η_t = lr · β_t")
    steps: int = Field(1, ge=1, description=STEPS_DOC)
    rate: Literal["scalar", "key"] = Field(
        "scalar", description="scalar: one step size η_t per head; key: one per key row of a matrix memory "
        "(β_t is [B, T, H, K]: RWKV-7's vector in-context learning rate)")

    def update(self, ctx: TokenContext, state: State) -> State:
        if ctx.shrink is not None:
            return self._proximal_gradient(ctx, state)
        anchor = state
        for _ in range(self.steps):
            g = grad(lambda s: ctx.loss(s) + ctx.penalty(s, anchor))(state)
            state = _axpy(-ctx.lr, g, state)
        return state

    def _proximal_gradient(self, ctx: TokenContext, anchor: State) -> State:
        """K proximal-gradient steps, carried as the change ΔM from M_{t−1} (so that K = 1 with a
        zero threshold is the gd step bit for bit): ΔM ← shrink(ΔM − η ∇ℓ(M_{t−1} + ΔM))."""
        change, state = None, anchor
        for _ in range(self.steps):
            g = grad(ctx.loss)(state)
            step = tuple(-rows(ctx.lr, gi) * gi for gi in g)
            change = ctx.shrink(step if change is None else tuple(c + d for c, d in zip(change, step)))
            state = tuple(a + c for a, c in zip(anchor, change))
        return state


class RetainThenGD(Axis):
    """Apply retention first, then one GD step on ℓ at the retained state:

        M' = M_{t−1} − η_t ∇R(M_{t−1})   (= α_t M_{t−1} for L2 decay)
        M_t = M' − η_t ∇ℓ(M')            (published Gated DeltaNet ordering)

    ``steps: K``: the retention once, then K gradient steps on ℓ (eq. 5.1).
    """

    kind: Literal["retain_then_gd"] = "retain_then_gd"
    lr: float = Field(1.0, gt=0.0, description="base learning rate; η_t = lr · β_t")
    steps: int = Field(1, ge=1, description=STEPS_DOC)

    def update(self, ctx: TokenContext, state: State) -> State:
        kept = retain(ctx, state)
        for _ in range(self.steps):
            kept = _axpy(-ctx.lr, grad(ctx.loss)(kept), kept)
        return kept


class Implicit(Axis):
    """Exact proximal (implicit GD) step after retention (Longhorn):

        M_t = argmin_M ℓ(M) + 1/(2η_t) ‖M − M'‖²,   M' = retained M_{t−1}

    (plus λ/2‖M − M'‖² when the retention is Proximal(λ)), solved by Newton's method with a conjugate-gradient inner solve on
    Hessian-vector products (both from autograd). For quadratic biases (ℓ2)
    one Newton step is exact and CG terminates in ≤ 2 iterations (the Hessian
    is I/η + k kᵀ ⊗ I); more steps serve non-quadratic biases.

    ``steps: K``: the retention once, then K proximal steps, each anchored at the previous
    one (the proximal point method; eq. 5.1 with f the implicit step).
    """

    kind: Literal["implicit"] = "implicit"
    lr: float = Field(1.0, gt=0.0, description="base step size; η_t = lr · β_t")
    newton_steps: int = Field(1, gt=0, description="outer Newton iterations (1 is exact for ℓ2)")
    cg_steps: int = Field(6, gt=0, description="conjugate-gradient iterations per Newton step")
    steps: int = Field(1, ge=1, description=STEPS_DOC)

    def update(self, ctx: TokenContext, state: State) -> State:
        anchor = retain(ctx, state)
        for _ in range(self.steps):
            anchor = self._proximal_step(ctx, anchor)
        return anchor

    def _proximal_step(self, ctx: TokenContext, anchor: State) -> State:
        """argmin_M ℓ(M) + 1/(2η)‖M − anchor‖² (+ R(M, anchor) for a proximal retention), by Newton–CG."""

        def objective(s: State) -> torch.Tensor:
            diff = _axpy(-1.0, anchor, s)
            prox = ctx.penalty(s, anchor) if ctx.proximal else 0.0
            return ctx.loss(s) + 0.5 * state_dot(diff, diff) / ctx.lr + prox

        m = anchor
        for _ in range(self.newton_steps):
            g = grad(objective)(m)
            step = _conjugate_gradient(lambda p, m=m: jvp(grad(objective), (m,), (p,))[1], g, self.cg_steps)
            m = _axpy(-1.0, step, m)
        return m


def _conjugate_gradient(hvp: Callable[[State], State], b: State, iters: int, tol: float = 0.0) -> State:
    """Solve H x = b by CG with a fixed iteration count (vmap-safe: no branching). ``tol`` > 0: iterations
    after ‖r‖ ≤ tol·‖b‖ add nothing (a singular H, such as the ℓ2 bias' Newton Hessian, would otherwise
    divide the rounding left in r by a vanishing curvature)."""
    tiny = torch.finfo(b[0].dtype).tiny
    x = tuple(torch.zeros_like(t) for t in b)
    r, p = b, b
    rr = state_dot(r, r)
    floor = tol * tol * rr
    for _ in range(iters):
        hp = hvp(p)
        a = torch.where(rr > floor, rr / (state_dot(p, hp) + tiny), 0.0)
        x = _axpy(a, p, x)
        r = _axpy(-a, hp, r)
        rr_new = state_dot(r, r)
        p = _axpy(rr_new / (rr + tiny), p, r)
        rr = rr_new
    return x


class Newton(Axis):
    """One (damped) Newton step on ℓ + R at M_{t−1} (thesis §2.4.4, second-order methods):

        M_t = M_{t−1} − η_t (∇²[ℓ + R](M_{t−1}) + δ I)⁻¹ ∇[ℓ + R](M_{t−1})

    with the Hessian applied as Hessian-vector products (autograd) and the system solved by conjugate
    gradients. The ℓ2 bias has the Hessian (k kᵀ) ⊗ I, singular along every key but k_t: with δ = 0 the
    step is the least-norm (pseudo-inverse) one, M_t = M_{t−1} − η_t k_t e_tᵀ/‖k_t‖², e_t = M_{t−1}ᵀk_t − v_t
    (exact recall at η_t = 1, the normalised delta rule); δ > 0 (Levenberg–Marquardt) or a proximal
    retention R = λ/2‖M − M_{t−1}‖² adds δ or λ to its curvature, β_t = η_t/(‖k_t‖² + δ + λ): the ridge
    solution of ℓ2 + R, which is the implicit step (Longhorn) with step 1/λ. On a quadratic objective
    one step at η_t = 1 is its exact minimiser; CG needs as many iterations as the Hessian has distinct
    eigenvalues (2 for ℓ2). ``steps: K`` takes K Newton steps, R anchored at M_{t−1}.
    """

    kind: Literal["newton"] = "newton"
    lr: float = Field(1.0, gt=0.0, description="step size; η_t = lr · β_t (1: the full Newton step)")
    damping: float = Field(0.0, ge=0.0, description="δ added to the Hessian (Levenberg–Marquardt); 0: the least-"
                           "norm step where the Hessian is singular")
    cg_steps: int = Field(4, gt=0, description="conjugate-gradient iterations per Newton step")
    steps: int = Field(1, ge=1, description=STEPS_DOC)

    def update(self, ctx: TokenContext, state: State) -> State:
        anchor = state

        def objective(s: State) -> torch.Tensor:
            return ctx.loss(s) + ctx.penalty(s, anchor)

        for _ in range(self.steps):
            g = grad(objective)(state)
            hvp = (lambda p, m=state: _axpy(self.damping, p, jvp(grad(objective), (m,), (p,))[1]))
            step = _conjugate_gradient(hvp, g, self.cg_steps, tol=1e3 * torch.finfo(g[0].dtype).eps)
            state = _axpy(-ctx.lr, step, state)
        return state


class Momentum(Axis):
    """GD with momentum (Titans):

        m_t = η_t m_{t−1} − θ_t ∇ℓ(M_{t−1})        (θ_t = lr · β_t)
        M_t = retained M_{t−1} + m_t               (α_t M_{t−1} + m_t for L2 decay)
    The momentum m has the memory's shape and is part of the state.
    """

    kind: Literal["momentum"] = "momentum"
    lr: float = Field(1.0, gt=0.0, description="base learning rate; θ_t = lr · β_t")
    eta: float = Field(0.9, ge=0.0, lt=1.0, description="momentum decay η when no per-token eta gate is given")

    def update(self, ctx: TokenContext, state: State) -> State:
        n = len(state) // 2
        mem, mom = state[:n], state[n:]
        g = grad(ctx.loss)(mem)
        mom = _axpy(-ctx.lr, g, tuple(ctx.eta * m for m in mom))
        kept = retain(ctx, mem)
        return tuple(k + m for k, m in zip(kept, mom)) + mom


class ClosedForm(Axis):
    """Exact minimiser of a weighted quadratic objective, accumulated over the
    prefix as sufficient statistics (normalised spectral mean) or solved at
    read time over a KV cache (Nadaraya–Watson). Curvature and linear term are
    read off the bias with autograd: one Newton step from 0 is exact."""

    kind: Literal["closed_form"] = "closed_form"


Optimizer = GD | RetainThenGD | Implicit | Newton | Momentum | ClosedForm
