"""ℓp with 1 < p < 2 (memories/bias.py, Lp): plain ℓp gives NaN gradients through the write where a residual
coordinate is exactly 0 (g's slope p(p−1)|e|^(p−2) → ∞); the default eps = (2/p)^(1/(p−2)) makes the loss
quadratic below ε, so every implementation's gradients are finite there and still equal each other."""
import warnings

import pytest
import torch
from torch.testing import assert_close

from assocmem.memories import GD, L2Decay, Lp, Matrix, Momentum, RetainThenGD
from assocmem.memories.bias import settled_error
from assocmem.mixers import MixerSpec
from assocmem.mixers.lower import derived, hand_written, lower
from assocmem.mixers.verify import make_case, max_abs_error, run, verify


def _zero_residual_inputs(B=1, T=5, H=1, K=3, V=2):
    """Random float64 inputs whose first value has an exact 0: with M_0 = 0, e = M_0 k − v is 0 there."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, d, generator=g, dtype=torch.float64) for d in (K, K, V))
    v[0, 0, 0, 0] = 0.0
    return q, k, v, torch.full((B, T, H), 0.5, dtype=torch.float64)


def _grads(fn, q, k, v, beta):
    xs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o, _ = fn(*xs, beta=beta)
    return o, torch.autograd.grad(o.square().sum(), xs)


def test_plain_lp_below_two_gives_nan_gradients_at_a_zero_residual_and_warns():
    with pytest.warns(UserWarning, match=r"p = 1.5 < 2 and eps: null: the gradient through the write is NaN"):
        spec = MixerSpec(memory=Matrix(), bias=Lp(p=1.5, eps=None), optimizer=RetainThenGD())
    o, grads = _grads(derived(spec), *_zero_residual_inputs())
    assert torch.isfinite(o).all() and not all(torch.isfinite(g).all() for g in grads)


def test_the_default_eps_keeps_every_implementation_finite_and_equal():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default needs no warning
        spec = MixerSpec(memory=Matrix(), bias=Lp(p=1.5), optimizer=RetainThenGD())
    assert spec.bias.eps == pytest.approx(0.5625, abs=1e-15)
    inputs = _zero_residual_inputs()
    want_o, want = _grads(derived(spec), *inputs)
    for name, fn in (("hand-written", hand_written(spec)[1]), ("auto", lower(spec).fn)):
        o, grads = _grads(fn, *inputs)
        assert all(torch.isfinite(g).all() for g in grads), name
        assert_close(o, want_o, rtol=0, atol=1e-13, msg=name)
        for g, w in zip(grads, want):
            assert_close(g, w, rtol=0, atol=1e-12, msg=name)


def test_the_inner_quadratic_has_lps_value_and_slope_at_eps():
    """Below ε the loss is (p/2) ε^(p−2) e² + (1 − p/2) ε^p, so ∇ = p ε^(p−2) e; above it p·sign(e)|e|^(p−1);
    value and slope are continuous at ε, and one step with β‖k‖² = 1 at the default ε moves e = ε to −ε."""
    p = 1.5
    bias, eps = Lp(p=p), settled_error(p)
    e = torch.tensor([-2.0, -0.6, -eps, -0.1, 0.0, 1e-300, 0.3, eps, 0.8, 7.0], dtype=torch.float64)
    pred = e.clone().requires_grad_(True)
    bias.loss(pred, torch.zeros_like(e)).backward()
    want = torch.where(e.abs() >= eps, p * e.sign() * e.abs() ** (p - 1), p * eps ** (p - 2) * e)
    assert_close(pred.grad, want, rtol=0, atol=1e-15)
    at = torch.tensor([eps], dtype=torch.float64)
    left, right = (float(bias.loss(at + d, torch.zeros(1, dtype=torch.float64))) for d in (-1e-9, 1e-9))
    assert abs(right - left - 2e-9 * p * eps ** (p - 1)) < 1e-15
    assert p * eps ** (p - 2) == pytest.approx(2.0, abs=1e-14)


@pytest.mark.slow  # compiles the scan form
def test_a_momentum_spec_with_p_below_two_verifies():
    """The issue's spec (ℓp p = 1.5, per-key decay, momentum) with the default eps: derived vs its scan form."""
    spec = MixerSpec(memory=Matrix(), bias=Lp(p=1.5), retention=L2Decay(gate="key"), optimizer=Momentum(),
                     layer={"lr_gate": "sigmoid"})
    results = verify(spec, T=6, extras=False)
    assert results and all(r.passed for r in results), results
    case = make_case(spec, B=1, T=4, H=1, K=3, V=2)
    assert max_abs_error(run(derived(spec), case), run(derived(spec), case)) == 0.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(p=3.0, eps=0.1), r"with p = 3 the slope is bounded: leave eps unset"),
    (dict(p=1.5, eps=0.5, clip=0.4), r"eps = 0.5 must be below clip = 0.4"),
    (dict(p=1.5, eps=0.0), r"greater than 0"),
])
def test_bad_eps_is_refused_with_the_reason(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Lp(**kwargs)


def test_gd_on_lp_below_two_is_finite_through_a_layer_backward():
    """A layer (joint GD, scalar decay) on inputs with zero rows: the backward pass stays finite."""
    from assocmem.mixers.layer import build_mixer

    spec = MixerSpec(memory=Matrix(), bias=Lp(p=1.2), retention=L2Decay(), optimizer=GD(),
                     layer={"num_heads": 2, "head_dim": 4, "lr_gate": "sigmoid"})
    torch.manual_seed(0)
    layer = build_mixer(spec, 16).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    x[:, :3] = 0.0  # zero inputs: v = 0 and M k = 0, so residuals are exactly 0
    x.requires_grad_(True)
    y, _ = layer(x)
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in layer.parameters()
                                                if p.grad is not None)
