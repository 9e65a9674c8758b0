"""Softmax attention: ops (recurrent vs SDPA vs FLA's naive reference) and the Attention module."""
from __future__ import annotations

import pytest
import torch

from assocmem.mixers.attention import Attention, AttentionState
from assocmem.mixers.norm import apply_rope, rope_angles
from assocmem.mixers.external import _fla_naive
from assocmem.mixers.ops.attention import recurrent_softmax_attention, sdpa_softmax_attention

F64 = dict(atol=1e-12, rtol=0)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/mixers/conftest.py


def _fla_naive_attn():
    mod = _fla_naive("attn")
    if mod is None:
        pytest.skip("fla-core not installed")
    return mod.naive_parallel_attn


def _qkv(B=2, T=9, H=4, Hkv=2, K=8, V=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g, dtype=dtype)
    k = torch.randn(B, T, Hkv, K, generator=g, dtype=dtype)
    v = torch.randn(B, T, Hkv, V, generator=g, dtype=dtype)
    return q, k, v


CASES = [  # (T, H, Hkv, window)
    (1, 4, 4, None), (7, 4, 2, None), (16, 4, 1, None), (17, 2, 2, 5), (37, 4, 2, 16), (5, 4, 4, 8),
]


@pytest.mark.parametrize("T,H,Hkv,window", CASES, ids=[f"T{c[0]}-H{c[1]}-kv{c[2]}-w{c[3]}" for c in CASES])
def test_forms_match_fla_reference(T, H, Hkv, window):
    naive = _fla_naive_attn()
    q, k, v = _qkv(T=T, H=H, Hkv=Hkv)
    ref, _ = naive(q, k, v, window_size=window)
    o_rec, _ = recurrent_softmax_attention(q, k, v, window=window)
    o_sdpa, _ = sdpa_softmax_attention(q, k, v, window=window)
    torch.testing.assert_close(o_rec, ref, **F64)
    torch.testing.assert_close(o_sdpa, ref, **F64)


@pytest.mark.parametrize("form", [recurrent_softmax_attention, sdpa_softmax_attention], ids=["recurrent", "sdpa"])
@pytest.mark.parametrize("window", [None, 4], ids=["full", "window4"])
@pytest.mark.parametrize("split", [1, 6, 10])
def test_state_passing(form, window, split):
    """f(x) == f(x[:, t:], initial_state=f(x[:, :t]).state), also token by token."""
    q, k, v = _qkv(T=11, H=4, Hkv=2)
    o_full, s_full = form(q, k, v, window=window, output_final_state=True)
    o1, s1 = form(q[:, :split], k[:, :split], v[:, :split], window=window, output_final_state=True)
    o2, s2 = form(q[:, split:], k[:, split:], v[:, split:], window=window, initial_state=s1,
                  output_final_state=True)
    torch.testing.assert_close(torch.cat([o1, o2], 1), o_full, **F64)
    torch.testing.assert_close(s2[0], s_full[0], **F64)
    torch.testing.assert_close(s2[1], s_full[1], **F64)
    expect_n = 11 if window is None else window
    assert s_full[0].shape == (2, 2, expect_n, 8) and s_full[1].shape == (2, 2, expect_n, 6)


def test_initial_state_forms_agree_and_no_state_by_default():
    q, k, v = _qkv(T=6)
    prefix = (torch.randn(2, 2, 5, 8, dtype=torch.float64), torch.randn(2, 2, 5, 6, dtype=torch.float64))
    o_r, s_r = recurrent_softmax_attention(q, k, v, initial_state=prefix, output_final_state=True)
    o_s, s_s = sdpa_softmax_attention(q, k, v, initial_state=prefix, output_final_state=True)
    torch.testing.assert_close(o_r, o_s, **F64)
    torch.testing.assert_close(s_r[0], torch.cat([prefix[0], k.transpose(1, 2)], 2), atol=0, rtol=0)
    assert sdpa_softmax_attention(q, k, v)[1] is None


def test_key_mask_removes_padded_pairs():
    """Masked pairs act as if absent: a row with pads at [0, 3) equals the unpadded row."""
    q, k, v = _qkv(B=1, T=8)
    mask = torch.tensor([[False, False, False] + [True] * 5])
    for form in (recurrent_softmax_attention, sdpa_softmax_attention):
        o_pad, _ = form(q, k, v, key_mask=mask)
        o_ref, _ = form(q[:, 3:], k[:, 3:], v[:, 3:])
        torch.testing.assert_close(o_pad[:, 3:], o_ref, **F64)
        assert torch.isfinite(o_pad).all()


def test_gradients_agree():
    q, k, v = (t.requires_grad_() for t in _qkv(T=7))
    cot = torch.randn(2, 7, 4, 6, dtype=torch.float64)
    grads = []
    for form in (recurrent_softmax_attention, sdpa_softmax_attention):
        o, _ = form(q, k, v, window=3)
        grads.append(torch.autograd.grad((o * cot).sum(), (q, k, v)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **F64)
    q1, k1, v1 = (t.detach()[:1, :3, :2, :3].clone().requires_grad_() for t in _qkv(T=7, H=2, Hkv=2))
    assert torch.autograd.gradcheck(lambda a, b, c: sdpa_softmax_attention(a, b, c)[0], (q1, k1, v1))


def test_float32_forms_agree():
    q, k, v = _qkv(T=33, dtype=torch.float32)
    torch.testing.assert_close(recurrent_softmax_attention(q, k, v, window=7)[0],
                               sdpa_softmax_attention(q, k, v, window=7)[0])


@pytest.mark.parametrize("bad,match", [
    (dict(k=torch.zeros(2, 9, 3, 8), v=torch.zeros(2, 9, 3, 6)), "multiple of the kv heads"),
    (dict(k=torch.zeros(2, 8, 2, 8)), "k must be"),
    (dict(window=0), "window"),
    (dict(initial_state=(torch.zeros(2, 2, 3, 5), torch.zeros(2, 2, 3, 6))), "initial_state"),
    (dict(key_mask=torch.ones(2, 3, dtype=torch.bool)), "key_mask"),
])
def test_bad_input(bad, match):
    q, k, v = _qkv(dtype=torch.float32)
    args = dict(k=k, v=v, window=None, initial_state=None, key_mask=None) | bad
    with pytest.raises(ValueError, match=match):
        sdpa_softmax_attention(q, args["k"], args["v"], window=args["window"], initial_state=args["initial_state"],
                               key_mask=args["key_mask"])


# ---------------------------------------------------------------- module

def _module(**kw) -> Attention:
    torch.manual_seed(0)
    opts = dict(num_heads=4, head_dim=8, num_kv_heads=2) | kw
    return Attention(32, **opts).double()


def test_rope_matches_transformers_llama():
    """RoPE angles and rotation equal transformers' Llama convention (rotate_half, θ^(−2i/K))."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    pos = torch.arange(5)[None].expand(2, 5) + 3
    cos, sin = rope_angles(pos, 8, 10000.0, torch.float64)
    inv = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    emb = torch.cat([pos[..., None] * inv] * 2, -1)  # [B, T, K], HF layout
    ref, _ = apply_rotary_pos_emb(x.transpose(1, 2), x.transpose(1, 2), emb.cos(), emb.sin())
    torch.testing.assert_close(apply_rope(x, cos, sin), ref.transpose(1, 2), **F64)


def test_module_matches_llama_attention():
    """The module equals transformers' LlamaAttention with the same weights (GQA, RoPE)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      attn_implementation="sdpa")  # eager softmaxes in float32
    ref = LlamaAttention(cfg, layer_idx=0).double()
    mine = _module()
    for a, b in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "o_proj")):
        getattr(ref, a).weight.data.copy_(getattr(mine, b).weight.data)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    pos = torch.arange(9)[None].expand(2, 9)
    inv = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    emb = torch.cat([pos[..., None] * inv] * 2, -1)  # HF layout [B, T, K], in float64
    cos, sin = emb.cos(), emb.sin()
    hf_cos, hf_sin = LlamaRotaryEmbedding(cfg)(x, pos)  # HF computes the angles in float32
    torch.testing.assert_close(hf_cos, cos, atol=1e-6, rtol=0)
    torch.testing.assert_close(hf_sin, sin, atol=1e-6, rtol=0)
    causal = torch.full((9, 9), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    want, _ = ref(x, position_embeddings=(cos, sin), attention_mask=causal)
    got, _ = mine(x)
    torch.testing.assert_close(got, want, **F64)


@pytest.mark.parametrize("kw", [dict(), dict(qk_rmsnorm=True), dict(window=4), dict(rope=False, num_kv_heads=1),
                                dict(short_conv=True, window=4, qk_rmsnorm=True)],
                         ids=["gqa", "qknorm", "window", "norope-mqa", "shortconv"])
def test_module_prefill_then_decode(kw):
    m = _module(**kw)
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    y_full, _ = m(x)
    y1, st = m(x[:, :7])
    outs = [y1]
    for t in range(7, 12):
        y, st = m(x[:, t:t + 1], state=st)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), y_full, **F64)
    assert isinstance(st, AttentionState) and st.pos.tolist() == [12, 12]
    conv = 3 * (m.H * m.K + m.Hkv * (m.K + m.V)) if kw.get("short_conv") else 0
    assert m.state_size(12) == (12 if "window" not in kw else 4) * m.Hkv * (m.K + m.V) + conv
    assert (st.conv is None) == (conv == 0)


def test_module_recurrent_form_equals_sdpa():
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    a, _ = _module(window=3)(x)
    b, _ = _module(window=3, form="recurrent")(x)
    torch.testing.assert_close(a, b, **F64)


@pytest.mark.parametrize("short_conv", [False, True], ids=["plain", "shortconv"])
def test_module_left_padding_equals_unpadded(short_conv):
    """Padded positions are masked and positions count real tokens only (same RoPE angles); with the
    short conv, padded tokens enter it as zeros, which equals its own left padding."""
    m = _module(qk_rmsnorm=True, short_conv=short_conv)
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    xp = torch.cat([torch.randn(1, 3, 32, dtype=torch.float64), x], 1)
    mask = torch.tensor([[False] * 3 + [True] * 6])
    y_ref, s_ref = m(x)
    y_pad, s_pad = m(xp, mask=mask)
    torch.testing.assert_close(y_pad[:, 3:], y_ref, **F64)
    assert s_pad.pos.tolist() == [6]
    step = torch.randn(1, 1, 32, dtype=torch.float64)
    torch.testing.assert_close(m(step, state=s_pad)[0], m(step, state=s_ref)[0], **F64)


def test_module_short_conv_matches_a_written_out_reference():
    """Step 2 of the module docstring written out with torch's depthwise conv1d (left zero padding),
    Llama's RoPE (transformers' apply_rotary_pos_emb) and a causal softmax, in float64."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    m = _module(short_conv=True, conv_size=3)
    B, T, H, Hkv, K = 2, 10, 4, 2, 8
    x = torch.randn(B, T, 32, dtype=torch.float64)
    z = torch.cat([m.q_proj(x), m.k_proj(x), m.v_proj(x)], -1)  # [B, T, C]
    z = torch.nn.functional.conv1d(torch.nn.functional.pad(z.transpose(1, 2), (2, 0)), m.conv.weight,
                                   groups=z.shape[-1]).transpose(1, 2)
    q, k, v = torch.nn.functional.silu(z).split([H * K, Hkv * K, Hkv * K], -1)
    q, k, v = q.view(B, T, H, K).transpose(1, 2), k.view(B, T, Hkv, K).transpose(1, 2), v.view(B, T, Hkv, K).transpose(1, 2)
    inv = 10000.0 ** (-torch.arange(0, K, 2, dtype=torch.float64) / K)
    emb = torch.cat([torch.arange(T, dtype=torch.float64)[:, None] * inv] * 2, -1)[None]  # [1, T, K]
    q, k = apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    scores = (q @ k.transpose(-1, -2)) * K ** -0.5 + torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * K)
    y, st = m(x)
    torch.testing.assert_close(y, m.o_proj(o), **F64)
    torch.testing.assert_close(st.conv, torch.cat([m.q_proj(x), m.k_proj(x), m.v_proj(x)], -1)[:, -2:], **F64)


def test_module_short_conv_refuses_padding_it_cannot_represent():
    m = _module(short_conv=True)
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="left padding only"):
        m(x, mask=torch.tensor([[True] * 5, [True] * 3 + [False] * 2]))  # right padding
    _, st = m(x)
    with pytest.raises(ValueError, match="left padding only"):
        m(x, state=st, mask=torch.tensor([[True] * 5, [False] + [True] * 4]))  # padding after a cache


def test_module_bad_config():
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        Attention(32, num_heads=4, head_dim=8, num_kv_heads=3)
    with pytest.raises(ValueError, match="even head_dim"):
        Attention(32, num_heads=4, head_dim=7)
    with pytest.raises(ValueError, match="form 'chunk'"):
        Attention(32, num_heads=4, head_dim=8, form="chunk")


def test_append_pairs_amortised_and_safe():
    """Decode appends write into spare slots of our own buffer; foreign storage is never written."""
    from assocmem.mixers.ops.attention import append_pairs

    prefix = torch.randn(2, 3, 5, 4)
    a = append_pairs(prefix, torch.randn(2, 3, 1, 4))  # allocates a buffer with headroom
    snapshot = a.clone()
    b = append_pairs(a, torch.randn(2, 3, 2, 4))  # written in place after a's end
    assert b.data_ptr() == a.data_ptr() and b.shape == (2, 3, 8, 4)
    torch.testing.assert_close(a, snapshot, atol=0, rtol=0)  # a's visible rows untouched
    torch.testing.assert_close(b[:, :, :6], snapshot, atol=0, rtol=0)
    big = torch.randn(2, 3, 9, 4)
    view, tail = big[:, :, :5], big[:, :, 5:].clone()
    c = append_pairs(view, torch.randn(2, 3, 1, 4))  # not our buffer: copied, big untouched
    torch.testing.assert_close(big[:, :, 5:], tail, atol=0, rtol=0)
    torch.testing.assert_close(c[:, :, :5], view, atol=0, rtol=0)
    d = append_pairs(a, torch.randn(2, 3, 1, 4))  # a is no longer the newest view: copied, b untouched
    assert d.data_ptr() != b.data_ptr()
    torch.testing.assert_close(b[:, :, :6], snapshot, atol=0, rtol=0)
    with torch.inference_mode():  # the decode setting: no autograd view tracking
        e = append_pairs(b, torch.randn(2, 3, 1, 4))
        assert e.data_ptr() == b.data_ptr()


def test_build_mixer_reads_attention_short_conv():
    """attention.short_conv (off in the preset) and the shared conv_size reach the module."""
    from assocmem.mixers import get_preset
    from assocmem.mixers.layer import build_mixer

    spec = get_preset("attn")
    assert build_mixer(spec, 32).conv is None
    on = spec.model_copy(update={"layer": spec.layer.model_copy(
        update={"conv_size": 3, "attention": spec.layer.attention.model_copy(update={"short_conv": True})})})
    conv = build_mixer(on, 32).conv
    assert conv is not None and conv.size == 3
