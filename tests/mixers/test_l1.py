"""ℓ1 retention λ‖M − M_{t−1}‖₁ (thesis §2.4.3) through one proximal-gradient step (soft-thresholding):
λ = 0 is the gd update bit for bit; the derivation equals the hand-written ISTA loop; updates are sparse."""
from __future__ import annotations

import pytest
import torch

from assocmem.memories import GD, L1, L2, DotProduct, Implicit, Matrix, NoRetention, RetainThenGD, derive
from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.mixers.lower import hand_written, lower
from assocmem.mixers.verify import EXACT_ATOL, make_case, max_abs_error, run

pytestmark = pytest.mark.usefixtures("one_thread")
LAYER = LayerOptions(num_heads=2, head_dim=8, qk_norm="l2", lr_gate="sigmoid")


def spec(lam: float, bias=None, steps: int = 1) -> MixerSpec:
    return MixerSpec(name="l1", memory=Matrix(), bias=bias or L2(), retention=L1(lam=lam),
                     optimizer=GD(steps=steps), layer=LAYER)


@pytest.mark.parametrize("bias", [L2(), DotProduct()], ids=["l2", "dot_product"])
def test_lambda_zero_is_gd_bit_for_bit(bias):
    sparse = spec(0.0, bias)
    plain = MixerSpec(memory=Matrix(), bias=bias, retention=NoRetention(), optimizer=GD(), layer=LAYER)
    case = make_case(sparse, T=25, seed=3)
    a, b = run(derive(sparse), case), run(derive(plain), case)
    assert all(torch.equal(x, y) for x, y in zip(a["output"] + a["state"], b["output"] + b["state"]))
    assert all(torch.equal(a["grad"][n], b["grad"][n]) for n in a["grad"])


@pytest.mark.parametrize("bias,steps", [(L2(), 1), (L2(), 3), (DotProduct(), 1)], ids=["l2", "l2-K3", "dot"])
def test_derived_equals_hand_written_ista(bias, steps):
    s = spec(0.05, bias, steps)
    assert s.algebra == "scan" and lower(s, "recurrent").name == "recurrent"
    name, fn = hand_written(s)
    assert name.startswith("recurrent_l1")
    case = make_case(s, T=33, seed=steps)
    assert max_abs_error(run(derive(s), case), run(fn, case)) <= EXACT_ATOL


def test_small_changes_are_dropped_and_large_ones_shrink():
    """One token: ΔS = soft(β k (v − Sᵀk)ᵀ, βλ) entry by entry (zero where |·| ≤ βλ)."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64), dim=-1)
            for _ in range(2))
    v = torch.randn(1, 1, 1, 6, generator=g, dtype=torch.float64)
    S0 = torch.randn(1, 1, 8, 6, generator=g, dtype=torch.float64)
    beta, lam = torch.full((1, 1, 1), 0.7, dtype=torch.float64), 0.1
    _, S = derive(spec(lam))(q, k, v, beta=beta, initial_state=S0, output_final_state=True)
    full = 0.7 * k[0, 0, 0][:, None] * (v[0, 0, 0] - S0[0, 0].T @ k[0, 0, 0])[None, :]
    want = torch.sign(full) * (full.abs() - 0.7 * lam).clamp(min=0)
    torch.testing.assert_close(S[0, 0] - S0[0, 0], want, atol=1e-15, rtol=0)
    dropped = full.abs() <= 0.07
    assert dropped.any() and (~dropped).any()
    assert torch.equal((S - S0)[0, 0][dropped], torch.zeros(int(dropped.sum()), dtype=torch.float64))


def test_l1_with_another_optimizer_is_refused():
    for opt in (Implicit(), RetainThenGD()):
        with pytest.raises(ValueError, match=r"retention: 'l1' with optimizer .*only the 'gd' optimizer"):
            MixerSpec(memory=Matrix(), bias=L2(), retention=L1(lam=0.1), optimizer=opt)
    with pytest.raises(ValueError, match="lam"):
        L1(lam=-1.0)


def test_preset_describes_its_update():
    s = get_preset("l1_deltanet")
    assert "soft(β_t (v_t − M_{t-1} k_t) k_tᵀ, β_t λ)" in derive(s).describe()
    assert lower(s).name == "scan"
