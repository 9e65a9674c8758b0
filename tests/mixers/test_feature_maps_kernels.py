"""Performer's FAVOR+ and cosFormer's cos re-weighting as feature maps (mixers/feature_maps.py): each against
its published formula, FAVOR+'s unbiasedness over many draws, and both with every hebbian class."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.feature_maps import CosFormer, FavorPlus, build_feature_map, orthogonal_gaussian, redraw_features
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.lower import lower

pytestmark = pytest.mark.usefixtures("one_thread")

HEBBIAN = ["linear_attention", "retnet", "gla", "mamba2", "hedgehog"]  # no decay, fixed, per-key, scalar (dt), normalised


def _with_map(name: str, feature_map: str, **layer) -> MixerSpec:
    base = get_preset(name)
    return MixerSpec.model_validate({**base.model_dump(), "layer": {**base.layer.model_dump(),
                                                                   "feature_map": feature_map, **layer}})


def test_favor_is_the_published_formula_with_orthogonal_gaussian_rows():
    phi = FavorPlus(3, 8, seed=5).double()
    x = torch.randn(2, 4, 3, 8, dtype=torch.float64)
    w = phi.omega  # (H, m, K)
    want = torch.exp(torch.einsum("bthk,hmk->bthm", x, w) - 0.5 * x.pow(2).sum(-1, keepdim=True)) / math.sqrt(8)
    torch.testing.assert_close(phi(x), want, atol=1e-12, rtol=0)
    gram = w @ w.transpose(-1, -2)  # rows orthogonal: a diagonal Gram matrix
    torch.testing.assert_close(gram - torch.diag_embed(torch.diagonal(gram, dim1=-2, dim2=-1)),
                               torch.zeros_like(gram), atol=1e-5, rtol=0)


def test_favor_is_unbiased_for_exp_of_the_dot_product():
    """E_ω[φ(q)·φ(k)] = exp(q·k) (Performer, Lemma 1): the mean over n independent draws of ω is within four
    standard errors (the sample std of the draws / √n) of exp(q·k); dropping the −‖x‖²/2 term is not."""
    K, n = 6, 4000
    g = torch.Generator().manual_seed(0)
    q, k = 0.4 * torch.randn(K, generator=g, dtype=torch.float64), 0.4 * torch.randn(K, generator=g, dtype=torch.float64)
    draws = []
    for seed in range(n):
        w = orthogonal_gaussian(1, K, seed)[0]  # (m, K)
        fq, fk = torch.exp(w @ q - q @ q / 2), torch.exp(w @ k - k @ k / 2)
        draws.append(float(fq @ fk) / K)
    est = torch.tensor(draws, dtype=torch.float64)
    se = float(est.std()) / math.sqrt(n)
    target = math.exp(float(q @ k))
    assert abs(float(est.mean()) - target) <= 4 * se, (float(est.mean()), target, se)
    biased = est * math.exp(float(q @ q + k @ k) / 2)  # without the −‖x‖²/2 normaliser
    assert abs(float(biased.mean()) - target) > 4 * se


def test_favor_redraws_by_seed_and_a_layer_shares_omega_between_q_and_k():
    phi = FavorPlus(2, 4, seed=0)
    first = phi.omega.clone()
    phi.redraw(1)
    assert not torch.equal(phi.omega, first)
    phi.redraw(0)
    assert torch.equal(phi.omega, first)
    m = build_mixer(_with_map("linear_attention", "favor"), 32)
    assert redraw_features(m, 7) == 2
    assert torch.equal(m.phi_q.omega, m.phi_k.omega) and "phi_q.omega" in m.state_dict()


def test_cosformer_is_the_published_reweighting():
    """φ(q_i)·φ(k_j) = ReLU(q_i)·ReLU(k_j) cos(π/2 · (i − j)/M) (cosFormer eqs. 8–10), for every i, j."""
    M, T = 10, 7
    phi = CosFormer(1, 4, horizon=M)
    q, k = torch.randn(1, T, 1, 4, dtype=torch.float64), torch.randn(1, T, 1, 4, dtype=torch.float64)
    pos = torch.arange(T)[None]
    got = torch.einsum("bihf,bjhf->bij", phi(q, pos), phi(k, pos))
    i, j = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(T, dtype=torch.float64)[None]
    want = torch.einsum("bihf,bjhf->bij", F.relu(q), F.relu(k)) * torch.cos(math.pi / 2 * (i - j) / M)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"cosformer feature map needs the positions \[B, T\]"):
        phi(q)


def test_cosformer_linear_attention_equals_the_quadratic_form():
    """The hebbian chunk form on cosFormer features = Σ_{j ≤ i} ReLU(q_i)·ReLU(k_j) cos(π(i − j)/2M) v_j."""
    M, T, K, V = 12, 9, 4, 3
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, T, 1, d, generator=g, dtype=torch.float64) for d in (K, K, V))
    phi, pos = CosFormer(1, K, horizon=M), torch.arange(T)[None]
    spec = _with_map("linear_attention", "cosformer", cosformer_horizon=M)
    o, _ = lower(spec, "chunk").fn(phi(q, pos), phi(k, pos), v, scale=1.0, chunk_size=4)
    i, j = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(T, dtype=torch.float64)[None]
    w = (F.relu(q[0, :, 0]) @ F.relu(k[0, :, 0]).t()) * torch.cos(math.pi / 2 * (i - j) / M) * (j <= i)
    torch.testing.assert_close(o[0, :, 0], w @ v[0, :, 0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("feature_map", ["favor", "cosformer"])
@pytest.mark.parametrize("name", HEBBIAN)
def test_every_hebbian_class_takes_the_map_and_decodes(name, feature_map):
    """Prefill and then one token at a time equals one call on the whole sequence (cosformer's positions
    continue from the state)."""
    spec = _with_map(name, feature_map, cosformer_horizon=16)
    assert spec.algebra == "hebbian"
    torch.manual_seed(0)
    m = build_mixer(spec, 32).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    with torch.no_grad():
        full, state = m(x)
        y, s = m(x[:, :6])
        pieces = [y]
        for t in range(6, 11):
            y, s = m(x[:, t:t + 1], state=s)
            pieces.append(y)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-12, rtol=0)
    if feature_map == "cosformer":
        assert s.pos.tolist() == [11, 11] and m.K_phi == 2 * m.K
    else:
        assert s.pos is None and m.K_phi == m.K


def test_unknown_map_lists_the_choices():
    with pytest.raises(ValueError, match="unknown feature_map 'rff'.*'cosformer'.*'favor'"):
        build_feature_map("rff", 1, 4)
