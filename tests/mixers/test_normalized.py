"""Normalised linear attention (thesis eqs. 2.31–2.36) as a layer option of a dot-product/GD spec,
and Hedgehog's learnable feature map (lolcats' softmax_dim map on a per-head linear layer)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.feature_maps import Hedgehog, build_feature_map, feature_width
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.lower import lower
from assocmem.mixers.ops.hebbian import chunk_hebbian
from assocmem.mixers.ops.normalized import EPS, normalized
from assocmem.mixers.verify import verify

pytestmark = pytest.mark.usefixtures("one_thread")
F64 = torch.float64


def test_eq_2_31_by_its_sums():
    """y_t = Σ_i v_i s_ti / (Σ_j s_tj + ε), s_ti = φ(q_t)ᵀφ(k_i)/√d_k (eq. 2.31 with FLA's ε = 1e-10), written
    with the T×T scores, equals the normalised chunk form (state [M | Z], eqs. 2.34–2.36), which also carries
    Z across a split."""
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 2, 45, 3, 6, 4
    q, k = (F.elu(torch.randn(B, T, H, K, generator=g, dtype=F64)) + 1 for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g, dtype=F64)
    scores = torch.einsum("bthk,bshk->bhts", q, k).tril() / K ** 0.5  # φ(q_t)ᵀφ(k_s)/√d_k, s ≤ t
    want = torch.einsum("bhts,bshv->bthv", scores, v) / (scores.sum(-1).transpose(1, 2)[..., None] + EPS)
    fn = normalized(chunk_hebbian)
    got, S = fn(q, k, v, output_final_state=True, chunk_size=16)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(S[..., -1], k.sum(1), atol=1e-12, rtol=0)  # Z_T = Σ φ(k_t)
    a, S1 = fn(q[:, :20], k[:, :20], v[:, :20], output_final_state=True)
    b, _ = fn(q[:, 20:], k[:, 20:], v[:, 20:], initial_state=S1)
    torch.testing.assert_close(torch.cat([a, b], 1), want, atol=1e-12, rtol=0)


def test_verify_against_fla_normalize_true():
    """hedgehog preset (dot product, gd, normalise): derived, hand-written, chunk and FLA's
    naive_recurrent_linear_attn(normalize=True) re-typed to float64, ≤ 1e-12."""
    results = verify("hedgehog", T=50)
    assert all(r.passed for r in results), [(r.pair, r.max_abs_error) for r in results if not r.passed]
    fla = [r for r in results if "normalize=True" in r.pair]
    assert fla and fla[0].max_abs_error <= 1e-12


def test_normalised_gla_wraps_every_form_and_reference():
    """A decayed normaliser (GLA): every form and the FLA GLA reference run through the same read-out."""
    data = get_preset("gla").model_dump()
    data["layer"]["normalize"] = True
    spec = MixerSpec.model_validate(data)
    results = verify(spec, T=40)
    assert all(r.passed for r in results)
    assert any("(normalised)" in r.pair for r in results)


def test_normalize_is_refused_outside_the_hebbian_class():
    data = get_preset("gated_deltanet").model_dump()
    data["layer"]["normalize"] = True
    with pytest.raises(ValueError, match=r"layer.normalize=True .* needs a hebbian spec: bias dot_product.*'delta'"):
        MixerSpec.model_validate(data)


def test_hedgehog_map_is_two_softmaxes_of_a_linear_map():
    """φ(x) = clamp([softmax(xW), softmax(−xW)], 1e-12) per head (lolcats' softmax_dim, fullspace);
    identity W at init; each half sums to 1; W learns."""
    g = torch.Generator().manual_seed(1)
    phi = Hedgehog(3, 5).double()
    x = torch.randn(2, 7, 3, 5, generator=g, dtype=F64)
    torch.testing.assert_close(phi(x), torch.cat([x.softmax(-1), (-x).softmax(-1)], -1).clamp(min=1e-12),
                               atol=0, rtol=0)
    with torch.no_grad():
        phi.weight.copy_(torch.randn(3, 5, 5, generator=g, dtype=F64))
    z = torch.stack([x[:, :, h] @ phi.weight[h] for h in range(3)], dim=2)
    y = phi(x)
    torch.testing.assert_close(y, torch.cat([z.softmax(-1), (-z).softmax(-1)], -1), atol=1e-15, rtol=0)
    torch.testing.assert_close(y[..., :5].sum(-1), torch.ones(2, 7, 3, dtype=F64), atol=1e-15, rtol=0)
    y.pow(2).sum().backward()
    assert phi.weight.grad.abs().sum() > 0
    assert feature_width("hedgehog", 5) == 10 and feature_width("elu_plus_one", 5) == 5
    with pytest.raises(ValueError, match="unknown feature_map 'cosine'"):
        build_feature_map("cosine", 2, 4)


def test_hedgehog_layer_decodes_and_holds_its_normaliser():
    """The hedgehog layer: key width 2K, state [B, H, 2K, V + 1]; prefill + decode == full forward."""
    data = get_preset("hedgehog").model_dump()
    data["layer"].update(num_heads=2, head_dim=8)
    spec = MixerSpec.model_validate(data)
    torch.manual_seed(0)
    m = build_mixer(spec, 32).double()
    assert m.state_size() == 2 * (16 * 9) and lower(spec).name == "chunk"
    x = torch.randn(2, 30, 32, dtype=F64)
    y, st = m(x)
    assert st.memory.shape == (2, 2, 16, 9)
    y1, s1 = m(x[:, :26])
    outs = [y1]
    for t in range(26, 30):
        yt, s1 = m(x[:, t:t + 1], state=s1)
        outs.append(yt)
    torch.testing.assert_close(torch.cat(outs, 1), y, atol=1e-12, rtol=0)
    torch.testing.assert_close(s1.memory, st.memory, atol=1e-12, rtol=0)
