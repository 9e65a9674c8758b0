"""SRPE (Wiola eqs. 11–18): a_s = 0 is transformers' RoPE at frequencies × (1 + 1/k_s); a_s ≠ 0
makes the score depend on absolute position (the exact-relativity claim fails), by exactly the
radial factor r_j(p) r_j(p') of eq. 19."""
import pytest
import torch
from pydantic import ValidationError
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from assocmem.mixers.norm import apply_rope
from assocmem.mixers.wiola import SRPEOptions, srpe_angles

B, T, H, D, THETA = 2, 37, 3, 16, 10000.0


def _qk(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T, H, D, generator=g, dtype=torch.float64),
            torch.randn(B, T, H, D, generator=g, dtype=torch.float64))


def _rotate(x, pos, options):
    c, s = srpe_angles(pos, D, THETA, options, x.dtype)
    return apply_rope(x, c, s)


def _positions(offset=0):
    return (offset + torch.arange(T))[None].expand(B, T)


def test_zero_amplitude_is_transformers_rope_with_scaled_frequencies():
    opts = SRPEOptions(k_s=3.0, a_s=0.0, f_s=0.5)
    q, k = _qk()
    pos = _positions(5)
    inv_freq = 1.0 / THETA ** (torch.arange(0, D, 2, dtype=torch.float64) / D) * (1 + 1 / opts.k_s)
    freqs = pos.double()[..., None] * inv_freq             # [B, T, D/2], as LlamaRotaryEmbedding builds it
    emb = torch.cat([freqs, freqs], dim=-1)                # [B, T, D]
    q_ref, k_ref = apply_rotary_pos_emb(q, k, emb.cos(), emb.sin(), unsqueeze_dim=2)
    torch.testing.assert_close(_rotate(q, pos, opts), q_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(_rotate(k, pos, opts), k_ref, atol=1e-12, rtol=0)


def _scores(q, k, p, p2, options):
    """Per-pair score q̃_j · k̃_j (pairs j, j + D/2) for q at positions p and k at p2: [B, T, H, D/2]."""
    qr, kr = _rotate(q, p, options), _rotate(k, p2, options)
    prod = qr * kr
    return prod[..., : D // 2] + prod[..., D // 2:]


def test_zero_amplitude_scores_depend_on_the_offset_only():
    opts = SRPEOptions(k_s=2.0, a_s=0.0, f_s=1.0)
    q, k = _qk()
    here = _scores(q, k, _positions(0), _positions(0) - 3, opts)
    shifted = _scores(q, k, _positions(100), _positions(100) - 3, opts)
    torch.testing.assert_close(here, shifted, atol=1e-12, rtol=0)


def test_nonzero_amplitude_scores_depend_on_absolute_position():
    opts = SRPEOptions(k_s=2.0, a_s=0.3, f_s=1.0)
    q, k = _qk()
    here = _scores(q, k, _positions(0), _positions(0) - 3, opts).sum(-1)
    shifted = _scores(q, k, _positions(100), _positions(100) - 3, opts).sum(-1)
    rel = (here - shifted).abs().max() / here.abs().max()
    assert rel > 0.05  # the same (q, k) at the same offset scores differently


def test_pair_score_is_radial_product_times_rope_score():
    """Eq. 19 for general q, k: score_j(p, p') = r_j(p) r_j(p') · score_j^{a_s=0}(p, p')."""
    opts = SRPEOptions(k_s=2.0, a_s=0.4, f_s=0.7)
    flat = opts.model_copy(update={"a_s": 0.0})
    q, k = _qk()
    p, p2 = _positions(11), _positions(0).flip(1)
    omega = THETA ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    radius = lambda pos: 1 + opts.a_s * torch.sin(pos.double()[..., None] * opts.f_s * omega)  # noqa: E731
    expected = radius(p)[:, :, None] * radius(p2)[:, :, None] * _scores(q, k, p, p2, flat)
    torch.testing.assert_close(_scores(q, k, p, p2, opts), expected, atol=1e-12, rtol=0)


def test_coefficients_follow_eqs_11_to_16():
    opts = SRPEOptions(k_s=4.0, a_s=0.25, f_s=0.5)
    c, s = srpe_angles(torch.tensor([[7]]), D, THETA, opts, torch.float64)
    j = 3
    omega = THETA ** (-2 * j / D)
    r = 1 + 0.25 * torch.sin(torch.tensor(7 * 0.5 * omega, dtype=torch.float64))
    ang = torch.tensor(7 * omega * (1 + 1 / 4.0), dtype=torch.float64)
    torch.testing.assert_close(c[0, 0, 0, j], r * ang.cos(), atol=1e-15, rtol=0)
    torch.testing.assert_close(s[0, 0, 0, j], r * ang.sin(), atol=1e-15, rtol=0)


def test_options_are_required_and_checked():
    with pytest.raises(ValidationError, match="k_s"):
        SRPEOptions(a_s=0.1, f_s=1.0)
    with pytest.raises(ValidationError, match="a_s"):
        SRPEOptions(k_s=2.0, a_s=1.0, f_s=1.0)
    with pytest.raises(ValidationError, match="extra"):
        SRPEOptions(k_s=2.0, a_s=0.1, f_s=1.0, theta=3.0)
    with pytest.raises(ValueError, match="even head_dim"):
        srpe_angles(torch.zeros(1, 1), 7, THETA, SRPEOptions(k_s=2.0, a_s=0.1, f_s=1.0), torch.float64)
