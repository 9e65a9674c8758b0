"""The Newton optimizer (memories/optimizer.py ``Newton``): which published updates one Newton step on the
memory is, checked in float64 against the hand-written ops of those presets (mixers/ops/) and against the
ridge solution written out with torch.linalg.solve."""
from __future__ import annotations

import pytest
import torch

from assocmem.memories import L2, DotProduct, Implicit, Matrix, Newton, NoRetention, Proximal, derive
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.ops.delta import recurrent_delta_rule, recurrent_longhorn
from assocmem.mixers.ops.hebbian import recurrent_hebbian

EXACT = dict(atol=1e-12, rtol=0)
B, T, H, K, V = 2, 9, 2, 5, 4


def inputs(seed=0, unit_keys=False):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g, dtype=torch.float64)
    beta = torch.rand(B, T, H, generator=g, dtype=torch.float64) + 0.2
    if unit_keys:
        k = k / k.norm(dim=-1, keepdim=True)
    return q, k, v, beta


def newton(bias=L2(), retention=NoRetention(), **opt) -> MixerSpec:
    return MixerSpec(memory=Matrix(), bias=bias, retention=retention, optimizer=Newton(**opt))


def test_newton_on_l2_is_the_normalised_delta_rule():
    """δ = 0: the least-norm step, β_t/‖k_t‖² in the delta rule (deltanet's op); δ > 0: β_t/(‖k_t‖² + δ)."""
    q, k, v, beta = inputs()
    kk = (k * k).sum(-1)
    for damping in (0.0, 0.7):
        o, S = derive(newton(damping=damping))(q, k, v, beta=beta, output_final_state=True)
        o_ref, S_ref = recurrent_delta_rule(q, k, v, beta=beta / (kk + damping), output_final_state=True)
        torch.testing.assert_close(o, o_ref, **EXACT)
        torch.testing.assert_close(S, S_ref, **EXACT)


def test_newton_reproduces_deltanet_at_unit_keys():
    """With deltanet's L2-normalised keys and β = 1, the full Newton step is deltanet's update: exact recall."""
    q, k, v, _ = inputs(unit_keys=True)
    o, S = derive(newton())(q, k, v, output_final_state=True)
    o_ref, S_ref = derive(get_preset("deltanet"))(q, k, v, output_final_state=True)
    torch.testing.assert_close(o, o_ref, **EXACT)
    torch.testing.assert_close(S, S_ref, **EXACT)
    torch.testing.assert_close(torch.einsum("bhkv,bhk->bhv", S, k[:, -1]), v[:, -1], **EXACT)


@pytest.mark.parametrize("lam", [0.5, 2.0])
def test_newton_with_proximal_retention_is_longhorn(lam):
    """ℓ2 + λ/2‖M − M_{t−1}‖²: one Newton step is the ridge solution = the implicit step with rate 1/λ
    (Longhorn's op, longhorn preset)."""
    q, k, v, _ = inputs(1)
    o, S = derive(newton(retention=Proximal(lam=lam)))(q, k, v, output_final_state=True)
    ones = torch.ones(B, T, H, dtype=torch.float64)
    o_ref, S_ref = recurrent_longhorn(q, k, v, beta=ones / lam, output_final_state=True)
    torch.testing.assert_close(o, o_ref, **EXACT)
    torch.testing.assert_close(S, S_ref, **EXACT)
    implicit = MixerSpec(memory=Matrix(), bias=L2(), retention=NoRetention(), optimizer=Implicit(lr=1 / lam))
    torch.testing.assert_close(o, derive(implicit)(q, k, v)[0], **EXACT)


def test_newton_step_is_the_ridge_closed_form():
    """S_t = argmin_S ½‖Sᵀk − v‖² + λ/2‖S − S_{t−1}‖² = (k kᵀ + λI)⁻¹ (k vᵀ + λ S_{t−1}), solved directly."""
    q, k, v, _ = inputs(2)
    lam = 0.3
    _, S = derive(newton(retention=Proximal(lam=lam)))(q, k, v, output_final_state=True)
    ref = torch.zeros(B, H, K, V, dtype=torch.float64)
    eye = torch.eye(K, dtype=torch.float64)
    for t in range(T):
        kt, vt = k[:, t], v[:, t]
        A = kt[..., :, None] * kt[..., None, :] + lam * eye
        ref = torch.linalg.solve(A, kt[..., :, None] * vt[..., None, :] + lam * ref)
    torch.testing.assert_close(S, ref, **EXACT)


def test_newton_on_the_dot_product_bias_is_hebbian_over_the_damping():
    """A linear bias has no curvature: the damped Newton step is the GD step scaled by 1/δ (linear attention)."""
    q, k, v, beta = inputs(3)
    o = derive(newton(bias=DotProduct(), damping=2.0))(q, k, v, beta=beta)[0]
    torch.testing.assert_close(o, recurrent_hebbian(q, k, v, beta=beta / 2.0)[0], **EXACT)


def test_newton_is_a_value_of_the_optimizer_axis():
    spec = newton(damping=0.1)
    assert MixerSpec.from_yaml(spec.to_yaml()) == spec
    assert spec.algebra == "scan" and "Newton–CG" in derive(spec).describe()
    with pytest.raises(ValueError, match="proximal"):
        MixerSpec(memory=Matrix(), bias=L2(), retention=Proximal(), optimizer=get_preset("deltanet").optimizer)
