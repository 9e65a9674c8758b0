"""Capacity probe: retrieval error vs number of stored pairs at a fixed state size."""
import math

import pytest
import torch

from assocmem.memories import GD, L2, Matrix, NoRetention
from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.mixers.lower import lower
from assocmem.probes.capacity import _matrix_gates, _unit, capacity_sweep, memory_capacity


def test_default_memories_share_the_state_budget():
    curves = capacity_sweep(num_pairs=(1,), trials=2)
    assert {c.label: c.state_floats for c in curves} == {
        "hebbian": 1024, "delta": 1024, "spectral": 1025, "nonparametric": 1024}
    for c in curves:  # one pair is always retrieved exactly (up to a gain for normalised memories)
        assert c.rel_mse_scaled[0] == pytest.approx(0.0, abs=1e-20 if c.algebra != "spectral" else 1e-24)


def test_hebbian_crosstalk_matches_theory():
    # r_i = v_i + Σ_{j≠i} (k_j·k_i) v_j with unit Gaussian keys: E rel_mse = (N − 1)/K
    c = memory_capacity("linear_attention", num_pairs=(8, 64), key_dim=32, value_dim=16, trials=64)
    for N, err in zip(c.num_pairs, c.rel_mse):
        assert err == pytest.approx((N - 1) / 32, rel=0.08)


def test_nonparametric_is_exact_inside_its_window_and_forgets_outside():
    c = memory_capacity("softmax", num_pairs=(4, 16, 32, 64), trials=4)  # window 1024 / 64 = 16 pairs
    assert max(c.rel_mse[:2]) < 1e-8
    assert c.rel_mse[2] > 0.45 and c.rel_mse[3] > 0.7  # at least the evicted fraction is lost


def test_spectral_read_equals_kernel_estimate():
    """SCA read with q = e^{iu_iθ}: r_i = (1/N) Σ_j v_j · (1/M) Σ_m cos(θ_m (u_j − u_i)) per channel."""
    from assocmem.probes.capacity import _spectral_capacity

    spec = get_preset("sca")
    fn = lower(spec, "prefix_sum").fn
    gen = torch.Generator().manual_seed(0)
    N, D, M = 7, 5, 4
    r, v = _spectral_capacity(fn, N, D, M, 2, gen, torch.float64)
    u = 2.0 * torch.rand(2, N, 1, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 1.0
    theta = (math.pi / 2) * torch.arange(M, dtype=torch.float64)
    du = u[:, None, :] - u[:, :, None]  # (B, i, j, 1, D) = u_j − u_i
    kernel = torch.cos(du[..., None] * theta).mean(-1)  # (B, i, j, 1, D)
    expected = (kernel * v[:, None]).sum(2) / N
    torch.testing.assert_close(r, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "gla", "huber_delta"])
def test_reads_do_not_write(name):
    """The read pass (k = 0, α = 1, η = 0) leaves the memory state unchanged."""
    spec = get_preset(name)
    fn = lower(spec, "recurrent").fn
    gen = torch.Generator().manual_seed(1)
    k = _unit((2, 5, 1, 8), gen, torch.float64)
    v = torch.randn(2, 5, 1, 8, generator=gen, dtype=torch.float64)
    _, S = fn(k, k, v, **_matrix_gates(spec, 2, 5, 8, 1.0, torch.float64, True), scale=1.0, output_final_state=True)
    _, S2 = fn(k, 0 * k, 0 * v, **_matrix_gates(spec, 2, 5, 8, 1.0, torch.float64, False), scale=1.0,
               initial_state=S, output_final_state=True)
    torch.testing.assert_close(S2, S, atol=1e-14, rtol=0)


def test_user_spec_delta_rule():
    """A user spec (matrix + L2 + plain GD = delta rule): with N <= K the error is small, and
    the gain-corrected error never exceeds the raw one."""
    spec = MixerSpec(name="my_delta", memory=Matrix(), bias=L2(), retention=NoRetention(), optimizer=GD(),
                     layer=LayerOptions(qk_norm="l2"))
    c = memory_capacity(spec, num_pairs=(1, 4, 64), key_dim=16, value_dim=8, trials=4)
    assert c.algebra == "delta" and c.state_floats == 128
    assert c.rel_mse[0] == pytest.approx(0.0, abs=1e-24)
    assert all(s <= r + 1e-15 for s, r in zip(c.rel_mse_scaled, c.rel_mse))
    assert c.rel_mse_scaled[2] > c.rel_mse_scaled[1]


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="num_pairs"):
        memory_capacity("deltanet", num_pairs=(0,))
    with pytest.raises(TypeError, match="spec"):
        memory_capacity(3)
