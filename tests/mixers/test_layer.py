"""build_mixer and the generic recurrent Mixer: gates, conv, forms, decode state."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from assocmem.memories import Huber, L2Decay, Matrix, RetainThenGD
from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.mixers.attention import Attention
from assocmem.mixers.conv import ShortConv
from assocmem.mixers.layer import Mixer, MixerState, build_mixer
from assocmem.mixers.sca import SCALayer

F64 = dict(atol=1e-10, rtol=0)
SMALL = dict(num_heads=2, head_dim=8)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/mixers/conftest.py


def small(name: str, **layer) -> MixerSpec:
    spec = get_preset(name)
    data = spec.model_dump()
    data["layer"] = {**data["layer"], **SMALL, **layer}
    return MixerSpec.model_validate(data)


def _mixer(name: str, form: str = "auto", **layer) -> Mixer:
    torch.manual_seed(0)
    return build_mixer(small(name, **layer), 32, form=form).double()


def test_build_mixer_dispatch():
    assert isinstance(build_mixer(small("softmax"), 32), Attention)
    assert build_mixer(small("sliding_window"), 32).window == 64
    assert isinstance(build_mixer(get_preset("sca"), 32), SCALayer)
    gdn = build_mixer(small("gated_deltanet"), 32)
    assert isinstance(gdn, Mixer) and gdn.form.name == "chunk" and gdn.step_form.name == "recurrent"
    with pytest.raises(TypeError, match="MixerSpec"):
        build_mixer("gdn", 32)
    with pytest.raises(ValueError, match="available forms"):
        build_mixer(small("gated_deltanet"), 32, form="sdpa")


RECURRENT = ["gated_deltanet", "mamba2", "gla", "retnet", "linear_attention", "deltanet", "longhorn",
             "gated_deltanet_joint", "kda"]


@pytest.mark.parametrize("name", RECURRENT)
def test_prefill_then_decode_equals_full(name):
    """f(x) == prefill(x[:, :t]) then one token at a time, in float64 (state: memory + conv buffer)."""
    m = _mixer(name)
    x = torch.randn(2, 70, 32, dtype=torch.float64)
    y_full, s_full = m(x)
    y, st = m(x[:, :65])
    outs = [y]
    for t in range(65, 70):
        yt, st = m(x[:, t:t + 1], state=st)
        outs.append(yt)
    torch.testing.assert_close(torch.cat(outs, 1), y_full, **F64)
    torch.testing.assert_close(st.memory, s_full.memory, **F64)
    torch.testing.assert_close(st.conv, s_full.conv, atol=1e-14, rtol=0)


@pytest.mark.parametrize("name", ["gated_deltanet", "mamba2", "gla"])
def test_chunk_form_equals_recurrent_form(name):
    x = torch.randn(2, 67, 32, dtype=torch.float64)
    a, sa = _mixer(name)(x)
    b, sb = _mixer(name, form="recurrent")(x)
    torch.testing.assert_close(a, b, **F64)
    torch.testing.assert_close(sa.memory, sb.memory, **F64)


def test_chunk_size_defaults_per_family_unless_set():
    """layer.chunk_size None lets the op choose C from K (per family), a set value is passed through;
    the result does not depend on C."""
    from assocmem.mixers.ops import delta_chunk, hebbian

    assert [hebbian.default_chunk_size(d) for d in (8, 16, 32, 64, 128)] == [16, 16, 32, 64, 64]
    assert [delta_chunk.default_chunk_size(d) for d in (8, 16, 32, 64, 128, 256)] == [16, 16, 16, 32, 64, 64]
    from assocmem.mixers.ops import delta

    seen = []
    real = delta.chunk_delta_rule

    def spy(*args, chunk_size, **kw):
        seen.append(chunk_size)
        return real(*args, chunk_size=chunk_size, **kw)

    x = torch.randn(2, 37, 32, dtype=torch.float64)
    ys = []
    for chunk_size in (None, 5):
        m = _mixer("gated_deltanet", chunk_size=chunk_size)
        m.form = dataclasses.replace(m.form, fn=spy)
        ys.append(m(x)[0])
    assert seen == [None, 5]  # None: the op's default (16 at head_dim 8)
    torch.testing.assert_close(ys[0], ys[1], **F64)
    with pytest.raises(ValueError, match="chunk_size"):
        LayerOptions(chunk_size=0)


def test_user_defined_scan_spec_decodes():
    """A user's spec (Huber bias, per-key decay, retain-then-GD) runs through the derived step."""
    spec = MixerSpec(name="mine", memory=Matrix(), bias=Huber(delta=0.5), retention=L2Decay(gate="scalar"),
                     optimizer=RetainThenGD(), layer=LayerOptions(**SMALL, qk_norm="l2", lr_gate="sigmoid"))
    torch.manual_seed(0)
    m = build_mixer(spec, 32, form="recurrent").double()
    x = torch.randn(1, 9, 32, dtype=torch.float64)
    y_full, _ = m(x)
    y, st = m(x[:, :6])
    outs = [y] + [m(x[:, t:t + 1], state=(st := m(x[:, :t])[1]))[0] for t in range(6, 9)]
    torch.testing.assert_close(torch.cat(outs, 1), y_full, **F64)


def test_gates_follow_layer_options():
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    mamba = _mixer("mamba2")
    g = mamba.gates(x)  # Mamba2: Δ = softplus(x W + dt_bias), log α = −exp(A_log)·Δ, β = Δ
    dt = F.softplus(mamba.a_proj(x) + mamba.dt_bias)
    torch.testing.assert_close(g["beta"], dt, atol=0, rtol=0)
    torch.testing.assert_close(g["log_alpha"], -torch.exp(mamba.A_log) * dt, atol=0, rtol=0)
    ret = _mixer("retnet").gates(x)["log_alpha"]  # RetNet: γ_h = 1 − 2^(−5−h)
    torch.testing.assert_close(ret[0, 0].exp(), torch.tensor([1 - 2 ** -5, 1 - 2 ** -6], dtype=torch.float64),
                               atol=1e-15, rtol=0)
    gla = _mixer("gla")
    torch.testing.assert_close(gla.gates(x)["log_alpha"], F.logsigmoid(gla.a_proj(x)).view(2, 5, 2, 8) / 16,
                               atol=0, rtol=0)
    gdn = _mixer("gated_deltanet")
    g = gdn.gates(x)
    torch.testing.assert_close(g["beta"], torch.sigmoid(gdn.b_proj(x)), atol=0, rtol=0)
    torch.testing.assert_close(g["log_alpha"], -gdn.A_log.exp() * F.softplus(gdn.a_proj(x) + gdn.dt_bias),
                               atol=0, rtol=0)
    assert _mixer("linear_attention").gates(x) == {"log_alpha": None, "beta": None}


def test_state_size():
    gdn = _mixer("gated_deltanet")  # H·K·V + (w − 1)·H(2K + V)
    assert gdn.state_size() == 2 * 8 * 8 + 3 * 2 * (3 * 8)
    titans = _mixer("titans_linear", form="recurrent")  # momentum doubles the memory
    assert titans.state_size() == 2 * (2 * 8 * 8) + 3 * 2 * 24
    assert _mixer("retnet", short_conv=False).state_size() == 2 * 8 * 8


def test_output_path():
    """o → D skip → per-head RMSNorm → · SiLU(x W_g) → W_o (gated_rmsnorm, here with Mamba2's D skip)."""
    m = _mixer("mamba2", output_norm="gated_rmsnorm", num_qk_heads=None, norm_eps=1e-6)
    x = torch.randn(1, 4, 32, dtype=torch.float64)
    o = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    v = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    ref = o + m.D[:, None] * v
    ref = ref / torch.sqrt(ref.pow(2).mean(-1, keepdim=True) + 1e-6) * m.norm_weight
    ref = ref * F.silu(m.g_proj(x)).view(1, 4, 2, 8)
    torch.testing.assert_close(m._output(o, v, x), ref, atol=1e-14, rtol=0)


def test_mamba2_output_path():
    """Mamba2 (norm_before_gate=False): o + D v, times SiLU(x W_g), then RMSNorm over the heads of each
    q/k group (here 4 heads in 2 groups), one weight per channel; short conv with a bias."""
    m = _mixer("mamba2", num_heads=4, num_qk_heads=2)
    assert m.conv.bias is not None and m.norm_weight.shape == (4 * 8,)
    with torch.no_grad():
        m.norm_weight.normal_()
    x = torch.randn(1, 3, 32, dtype=torch.float64)
    o, v = torch.randn(2, 1, 3, 4, 8, dtype=torch.float64)
    gated = (o + m.D[:, None] * v) * F.silu(m.g_proj(x)).view(1, 3, 4, 8)
    groups = gated.reshape(1, 3, 2, 16)  # heads (0, 1) and (2, 3) share a group
    ref = (groups / torch.sqrt(groups.pow(2).mean(-1, keepdim=True) + 1e-5)).reshape(1, 3, 32) * m.norm_weight
    torch.testing.assert_close(m._output(o, v, x).reshape(1, 3, 32), ref, atol=1e-14, rtol=0)


def test_short_conv_is_causal_depthwise_conv_with_buffer():
    torch.manual_seed(0)
    conv = ShortConv(6, 4).double()
    z = torch.randn(2, 9, 6, dtype=torch.float64)
    ref = F.silu(F.conv1d(F.pad(z.transpose(1, 2), (3, 0)), conv.weight, groups=6)).transpose(1, 2)
    y, buf = conv(z)
    torch.testing.assert_close(y, ref, atol=1e-14, rtol=0)
    torch.testing.assert_close(buf, z[:, -3:], atol=0, rtol=0)
    y1, b1 = conv(z[:, :5])
    y2, _ = conv(z[:, 5:], b1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), ref, atol=1e-14, rtol=0)
    with pytest.raises(ValueError, match="conv buffer"):
        conv(z, torch.zeros(2, 2, 6, dtype=torch.float64))


def test_bad_state():
    m = _mixer("gla")
    with pytest.raises(TypeError, match="MixerState"):
        m(torch.randn(1, 2, 32, dtype=torch.float64), state=torch.zeros(1, 2, 8, 8))
    assert isinstance(m(torch.randn(1, 2, 32, dtype=torch.float64))[1], MixerState)
    assert m(torch.randn(1, 2, 32, dtype=torch.float64), return_state=False)[1] is None
    assert math.isfinite(float(m(torch.randn(1, 3, 32, dtype=torch.float64))[0].detach().sum()))


FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sca_reference"


@pytest.mark.parametrize("variant", ["sca_layer", "sca_layer_gqa"])
def test_sca_spec_builds_the_authors_layer(variant):
    """build_mixer(sca spec with the fixture's options) loads the authors' weights and reproduces their
    output; the hybrid block around it is x + SCA(RMSNorm(x)) (Nautile §2.1, pre-norm + residual)."""
    path = FIXTURE_DIR / f"{variant}.safetensors"
    from safetensors import safe_open
    from safetensors.torch import load_file

    from assocmem.models.blocks import Block

    with safe_open(str(path), "pt") as f:
        cfg = json.loads(f.metadata()["config"])
    tensors = load_file(str(path))
    layer = dict(num_heads=cfg["num_heads"], conv_size=cfg["conv_kernel_size"],
                 sca=dict(query_heads=cfg["num_query_heads"], expand=cfg["expand_factor"],
                          out_expand=cfg["out_expand_factor"], maxlen=cfg["maxlen"]))
    spec = MixerSpec.model_validate({**get_preset("sca").model_dump(), "layer": {**get_preset("sca").layer.model_dump(),
                                                                                 **layer}})
    block = Block(spec, cfg["d_model"], mlp_hidden=0, norm_eps=1e-6, layer_idx=0).double()
    weights = {k: v for k, v in tensors.items() if not k.startswith(("core.", "state.", "input", "output", "step.",
                                                                      "prefill20"))}
    block.mixer.load_state_dict(weights, strict=True)
    x = tensors["input"]
    y, _ = block.mixer(x)
    torch.testing.assert_close(y, tensors["output"], atol=1e-12, rtol=0)
    with torch.no_grad():
        block.mixer_norm.weight.copy_(torch.linspace(0.5, 1.5, cfg["d_model"], dtype=torch.float64))
    out, _ = block(x)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * block.mixer_norm.weight
    torch.testing.assert_close(out, x + block.mixer(normed)[0], atol=1e-12, rtol=0)
