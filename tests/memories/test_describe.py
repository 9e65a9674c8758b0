"""describe(): the closed form shown matches what the derivation computes (notation M = Sᵀ)."""
import torch

from assocmem.memories import GD, DotProduct, Huber, L2Decay, Matrix, RetainThenGD, derive
from assocmem.memories.describe import describe
from assocmem.mixers import MixerSpec


def test_per_key_decay_scales_the_columns_of_m():
    """With k = 0 nothing is written, so one derived step is pure retention: S_t = diag(α) S_{t−1}
    (S ∈ R^{K×V}), i.e. M_t = M_{t−1} diag(α_t) for M = Sᵀ, as describe() says."""
    spec = MixerSpec(memory=Matrix(), bias=Huber(delta=0.5), retention=L2Decay(gate="key"), optimizer=RetainThenGD())
    assert describe(spec).startswith("M' = M_{t-1} diag(α_t);")
    g = torch.Generator().manual_seed(0)
    B, H, K, V = 1, 1, 3, 2
    S0 = torch.randn(B, H, K, V, generator=g, dtype=torch.float64)
    alpha = torch.rand(B, 1, H, K, generator=g, dtype=torch.float64) * 0.5 + 0.25
    q, k, v = torch.zeros(B, 1, H, K, dtype=torch.float64), torch.zeros(B, 1, H, K, dtype=torch.float64), \
        torch.randn(B, 1, H, V, generator=g, dtype=torch.float64)
    _, S1 = derive(spec)(q, k, v, log_alpha=alpha.log(), beta=torch.ones(B, 1, H, dtype=torch.float64),
                         initial_state=S0, output_final_state=True)
    M0, M1 = S0[0, 0].T, S1[0, 0].T  # [V, K]
    torch.testing.assert_close(M1, M0 @ torch.diag(alpha[0, 0, 0]), atol=1e-15, rtol=0)


def test_a_base_learning_rate_shows_in_the_step():
    spec = MixerSpec(memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="key"), optimizer=GD(lr=0.25))
    assert describe(spec) == "M_t = M_{t-1} diag(α_t) + 0.25·β_t v_t k_tᵀ"
    assert "β_t v_t" in describe(MixerSpec(memory=Matrix(), bias=DotProduct(), optimizer=GD()))
