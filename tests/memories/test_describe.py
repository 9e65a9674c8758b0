"""describe(): the closed form shown matches what the derivation computes (notation M = Sᵀ)."""
import torch

from assocmem.memories import GD, DotProduct, Huber, L2Decay, Matrix, Momentum, RetainThenGD, derive
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


def _one_token(spec, S0, k, v, alpha, beta, eta=None):
    """One derived token from state S0 (S = Mᵀ, [1, 1, K, V] or a pair with momentum); returns M_1 = S_1ᵀ."""
    q = torch.zeros_like(k)
    log_alpha = alpha.log()
    _, S1 = derive(spec)(q, k, v, log_alpha=log_alpha, beta=beta, eta=eta, initial_state=S0, output_final_state=True)
    return S1


def test_a_generic_gradient_step_is_written_out_and_computed_as_written():
    """Specs with no published closed form: describe() composes ∇ℓ, the retention and the optimizer, and one
    derived token equals that text evaluated by hand (float64, B = H = 1)."""
    g = torch.Generator().manual_seed(1)
    K, V = 4, 3
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    k, v = rnd(1, 1, 1, K), rnd(1, 1, 1, V)
    kt, vt = k[0, 0, 0], v[0, 0, 0]
    beta = torch.full((1, 1, 1), 0.7, dtype=torch.float64)

    # Huber bias, scalar ℓ2 decay, one joint GD step: M_t = α_t M_{t-1} − β_t g k_tᵀ, g = clamp(e, −δ, δ)
    spec = MixerSpec(memory=Matrix(), bias=Huber(delta=0.3), retention=L2Decay(), optimizer=GD())
    assert describe(spec) == ("generic gradient step: M_t = α_t M_{t-1} − β_t ∇ℓ(M_{t-1});  ∇ℓ(M) = g k_tᵀ,  "
                              "g = clamp(e, −δ, δ), δ = 0.3,  e = M k_t − v_t")
    S0, alpha = rnd(1, 1, K, V), torch.full((1, 1, 1), 0.9, dtype=torch.float64)
    M0 = S0[0, 0].T
    e = M0 @ kt - vt
    want = 0.9 * M0 - 0.7 * torch.outer(e.clamp(-0.3, 0.3), kt)
    torch.testing.assert_close(_one_token(spec, S0, k, v, alpha, beta)[0, 0].T, want, atol=1e-15, rtol=0)

    # dot-product bias, per-key decay, momentum: m_t = η_t m_{t-1} + β_t v_t k_tᵀ; M_t = M_{t-1} diag(α_t) + m_t
    spec = MixerSpec(memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="key"), optimizer=Momentum())
    assert describe(spec) == ("generic gradient step: m_t = η_t m_{t-1} − β_t ∇ℓ(M_{t-1});  "
                              "M_t = M_{t-1} diag(α_t) + m_t;  ∇ℓ(M) = g k_tᵀ,  g = −v_t")
    S0, m0 = rnd(1, 1, K, V), rnd(1, 1, K, V)
    alpha, eta = torch.rand(1, 1, 1, K, generator=g, dtype=torch.float64) * 0.5 + 0.4, torch.full((1, 1, 1), 0.6,
                                                                                                    dtype=torch.float64)
    S1, m1 = _one_token(spec, (S0, m0), k, v, alpha, beta, eta)
    mom = 0.6 * m0[0, 0].T + 0.7 * torch.outer(vt, kt)
    torch.testing.assert_close(m1[0, 0].T, mom, atol=1e-15, rtol=0)
    torch.testing.assert_close(S1[0, 0].T, S0[0, 0].T @ torch.diag(alpha[0, 0, 0]) + mom, atol=1e-15, rtol=0)
