"""Multi-head latent attention (mixers/latent_attention.py) beyond the layer pairs against transformers'
DeepseekV3Attention (tests/layers/test_layer_pairs.py): DeepSeek-V2's equations written out, the absorbed
decode form against the expanded one, the compressed cache and what is refused."""
from __future__ import annotations

import math

import pytest
import torch

from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.latent_attention import LatentAttention, LatentState
from assocmem.mixers.layer import attention_arguments, build_mixer

H, DH, DR, DV, DC, DQ, D = 3, 6, 4, 5, 7, 9, 16


def mla(q_rank=DQ, absorb=True, seed=0) -> LatentAttention:
    torch.manual_seed(seed)
    m = LatentAttention(D, num_heads=H, head_dim=DH, value_dim=DV, kv_rank=DC, rope_dim=DR, q_rank=q_rank,
                        rope_theta=100.0, absorb=absorb).double()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def paper(m: LatentAttention, h: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2 eqs. 9–19 token by token, heads one at a time, float64 (with the released layers' RMSNorm on
    the latents and RoPE on pairs (i, i + d_R/2))."""
    def rms(x, w):
        return x / torch.sqrt((x * x).mean() + 1e-6) * w

    def rope(x, t):
        half = DR // 2
        ang = t * 100.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / DR)
        a, b = x[:half], x[half:]
        return torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()])

    W_DKV, W_KR = m.kv_a_proj_with_mqa.weight[:DC], m.kv_a_proj_with_mqa.weight[DC:]
    W_UKV = m.kv_b_proj.weight.view(H, DH + DV, DC)
    W_Q = m.q_b_proj.weight.view(H, DH + DR, DQ)
    out = torch.zeros(h.shape[0], H * DV, dtype=torch.float64)
    c_kv = [rms(W_DKV @ h[t], m.kv_a_layernorm.weight) for t in range(h.shape[0])]            # eq. 9
    k_r = [rope(W_KR @ h[t], t) for t in range(h.shape[0])]                                    # eq. 15
    for t in range(h.shape[0]):
        c_q = rms(m.q_a_proj.weight @ h[t], m.q_a_layernorm.weight)                            # eq. 12
        for i in range(H):
            q = torch.cat([W_Q[i, :DH] @ c_q, rope(W_Q[i, DH:] @ c_q, t)])                    # eqs. 13, 14, 16
            k = torch.stack([torch.cat([W_UKV[i, :DH] @ c_kv[j], k_r[j]]) for j in range(t + 1)])  # eqs. 10, 17
            v = torch.stack([W_UKV[i, DH:] @ c_kv[j] for j in range(t + 1)])                  # eq. 11
            p = torch.softmax(k @ q / math.sqrt(DH + DR), 0)                                   # eq. 18
            out[t, i * DV:(i + 1) * DV] = p @ v
    return out @ m.o_proj.weight.T                                                             # eq. 19


@torch.no_grad()
def test_equals_the_paper_equations():
    m = mla()
    x = torch.randn(2, 7, D, dtype=torch.float64)
    y, _ = m(x)
    for b in range(2):
        torch.testing.assert_close(y[b], paper(m, x[b]), atol=1e-12, rtol=0)


@pytest.mark.parametrize("q_rank", [DQ, None])
@torch.no_grad()
def test_absorbed_decode_equals_expanded(q_rank):
    """W_UK folded into the query and W_UV after the read (decode with latent.absorb) = the expanded cache."""
    x = torch.randn(2, 10, D, dtype=torch.float64)
    outs = {}
    for absorb in (True, False):
        m = mla(q_rank, absorb)
        y, state = m(x[:, :6])
        pieces = [y]
        for t in range(6, 10):
            y, state = m(x[:, t:t + 1], state=state)
            pieces.append(y)
        outs[absorb] = torch.cat(pieces, 1)
        torch.testing.assert_close(outs[absorb], m(x)[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(outs[True], outs[False], atol=1e-12, rtol=0)


@torch.no_grad()
def test_cache_holds_the_latents_only():
    """The state is c_KV and k_R: d_c + d_R floats per token, against 2·H·d_h of multi-head attention."""
    m = mla()
    _, state = m(torch.randn(2, 5, D, dtype=torch.float64))
    assert isinstance(state, LatentState)
    assert state.latent.shape == (2, 5, DC) and state.rope_keys.shape == (2, 5, DR)
    assert m.state_size(5) == 5 * (DC + DR)
    mha = build_mixer(get_preset("softmax"), 64)
    latent = build_mixer(get_preset("mla"), 64)
    assert (latent.state_size(100), mha.state_size(100)) == (100 * (256 + 32), 100 * 2 * 4 * 64)


def test_refusals():
    data = get_preset("mla").model_dump()
    data["layer"]["attention"]["num_kv_heads"] = 2
    with pytest.raises(ValueError, match="mha options .*num_kv_heads"):
        MixerSpec.model_validate(data)
    data = get_preset("mla").model_dump()
    data["layer"]["attention"]["latent"]["rope_dim"] = 5
    with pytest.raises(ValueError, match="rope_dim must be even"):
        MixerSpec.model_validate(data)
    with pytest.raises(ValueError, match="takes kind 'mha' only"):  # Wiola's attention builds on the mha module
        attention_arguments(get_preset("mla"), "auto", None)
    data = get_preset("mla").model_dump()
    data["retention"] = {"kind": "window", "size": 8}
    with pytest.raises(ValueError, match="keeps its whole latent cache"):
        build_mixer(MixerSpec.model_validate(data), 32)


def test_converter_refuses_scaled_rope_and_biases():
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    from assocmem.mixers.convert import from_hf

    shape = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=1,
                 q_lora_rank=None, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)
    cfg = transformers.DeepseekV3Config(**shape, attention_bias=True)
    with pytest.raises(ValueError, match="attention_bias = True is not supported"):
        from_hf(DeepseekV3Attention(cfg, 0))
    cfg = transformers.DeepseekV3Config(**shape, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                               "original_max_position_embeddings": 64})
    with pytest.raises(ValueError, match="rope_type = 'yarn' is not supported"):
        from_hf(DeepseekV3Attention(cfg, 0))
