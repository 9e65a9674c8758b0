"""DSFF (Wiola eqs. 34–37) against transformers' MLPs: stream A is LlamaMLP (SwiGLU), stream B a
GELU MLP (GPTNeoXMLP without biases); W_f = 0 averages them; a saturated gate gives SwiGLU exactly."""
import pytest
import torch
import torch.nn as nn
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXMLP
from transformers.models.llama.modeling_llama import LlamaMLP

from assocmem.mixers.wiola import DSFF

D, DA, DB = 12, 8, 40


def _dsff(seed=0):
    torch.manual_seed(seed)
    m = DSFF(D, DA, DB).double()
    for p in m.parameters():
        nn.init.normal_(p, std=0.3)
    return m


def _x():
    return torch.randn(3, 7, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def _swiglu_reference(m):
    ref = LlamaMLP(LlamaConfig(hidden_size=D, intermediate_size=DA, hidden_act="silu", num_attention_heads=2)).double()
    with torch.no_grad():
        ref.gate_proj.weight.copy_(m.gate_a.weight)
        ref.up_proj.weight.copy_(m.up_a.weight)
        ref.down_proj.weight.copy_(m.down_a.weight)
    return ref


def _gelu_reference(m):
    ref = GPTNeoXMLP(GPTNeoXConfig(hidden_size=D, intermediate_size=DB, hidden_act="gelu", num_attention_heads=2)).double()
    with torch.no_grad():
        ref.dense_h_to_4h.weight.copy_(m.up_b.weight)
        ref.dense_h_to_4h.bias.zero_()
        ref.dense_4h_to_h.weight.copy_(m.down_b.weight)
        ref.dense_4h_to_h.bias.zero_()
    return ref


def test_streams_are_swiglu_and_gelu_mlps():
    m, x = _dsff(), _x()
    a, b = m.streams(x)
    torch.testing.assert_close(a, _swiglu_reference(m)(x), atol=1e-13, rtol=0)
    torch.testing.assert_close(b, _gelu_reference(m)(x), atol=1e-13, rtol=0)


def test_forward_is_eqs_34_to_37():
    m, x = _dsff(), _x()
    a, b = _swiglu_reference(m)(x), _gelu_reference(m)(x)
    alpha = torch.sigmoid(torch.einsum("...i,oi->...o", torch.cat([a, b], -1), m.fuse.weight))
    torch.testing.assert_close(m(x), alpha * a + (1 - alpha) * b, atol=1e-13, rtol=0)
    assert ((alpha > 0.05) & (alpha < 0.95)).float().mean() > 0.5  # a real per-dimension blend here


def test_zero_fusion_weights_average_the_streams():
    m, x = _dsff(), _x()
    with torch.no_grad():
        m.fuse.weight.zero_()
    torch.testing.assert_close(m(x), 0.5 * (_swiglu_reference(m)(x) + _gelu_reference(m)(x)), atol=1e-13, rtol=0)


@pytest.mark.parametrize("bias,which", [(40.0, "swiglu"), (-40.0, "gelu")])
def test_saturated_gate_is_one_stream(bias, which):
    """σ(±40) rounds to 1 / 0 in float64: the fused output is exactly one stream."""
    m, x = _dsff(), _x()
    m.fuse = nn.Linear(2 * D, D, bias=True).double()
    with torch.no_grad():
        m.fuse.weight.zero_()
        m.fuse.bias.fill_(bias)
    ref = _swiglu_reference(m) if which == "swiglu" else _gelu_reference(m)
    torch.testing.assert_close(m(x), ref(x), atol=1e-13, rtol=0)


def test_bad_widths_raise():
    with pytest.raises(ValueError, match="hidden_b"):
        DSFF(8, 4, 0)
