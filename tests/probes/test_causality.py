"""Perturb-the-future causality probe: flags non-causal mixers at the right position, passes
every preset (mixer modules in float64, ops, HF models) bit for bit."""
import pytest
import torch

from assocmem.mixers import get_preset, list_presets
from assocmem.probes.causality import (
    check_causality, mixer_causality, model_causality, op_causality, preset_mixer_causality, spec_causality,
)


class MeanOverSequence(torch.nn.Module):
    """GCLA-style global context (seed 002): y_t = x_t + mean over ALL T positions. Not causal."""

    def forward(self, x):
        return x + x.mean(dim=1, keepdim=True), None


class CircularFFTFilter(torch.nn.Module):
    """FOH-style circular FFT filter over the whole sequence (seed 003). Not causal."""

    def __init__(self, T):
        super().__init__()
        self.h = torch.nn.Parameter(torch.randn(T, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        X = torch.fft.rfft(x, dim=1)
        H = torch.fft.rfft(self.h, n=x.shape[1])[None, :, None]
        return torch.fft.irfft(X * H, n=x.shape[1], dim=1)


class MergeNextFrom(torch.nn.Module):
    """ATM-style merge of t with t+1 (seed 002), only for t >= start; causal before."""

    def __init__(self, start, weight=1.0):
        super().__init__()
        self.start, self.weight = start, weight

    def forward(self, x):
        y = x.clone()
        y[:, self.start:-1] = y[:, self.start:-1] + self.weight * x[:, self.start + 1:]
        return y


def rand_x(T=12, d=5):
    return torch.randn(2, T, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("mixer", [MeanOverSequence(), CircularFFTFilter(12)], ids=["gcla_mean", "circular_fft"])
def test_global_mixers_leak_at_position_zero(mixer):
    report = mixer_causality(mixer, rand_x())
    assert not report.causal
    assert report.first_leak == 0
    assert report.max_leak > 1e-3


def test_first_leaking_position_is_exact():
    report = mixer_causality(MergeNextFrom(start=5), rand_x())
    assert report.first_leak == 5
    assert report.leak[:5] == [0.0] * 5
    assert all(v > 0 for v in report.leak[5:11])
    assert report.leak[11] == 0.0  # the last position has no future


def test_tolerance_option():
    tiny = MergeNextFrom(start=3, weight=1e-12)
    strict = mixer_causality(tiny, rand_x())
    assert not strict.causal and strict.first_leak == 3 and strict.max_leak < 1e-10
    assert mixer_causality(tiny, rand_x(), atol=1e-9).causal


def test_op_form_flags_reverse_cumsum_and_passes_cumsum():
    """(a) functional op: a prefix sum is causal, a suffix sum is not (leaks at 0)."""
    def prefix(q, k, v, *, beta):
        return (beta[..., None] * k * v).cumsum(1), None

    def suffix(q, k, v, *, beta):
        return (beta[..., None] * k * v).flip(1).cumsum(1).flip(1), None

    g = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(2, 9, 3, 4, generator=g, dtype=torch.float64) for n in "qkv"}
    inputs["beta"] = torch.rand(2, 9, 3, generator=g, dtype=torch.float64)
    assert op_causality(prefix, inputs).causal
    leak = op_causality(suffix, inputs)
    assert leak.first_leak == 0 and not leak.causal


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="same length"):
        check_causality(lambda kw: kw["a"], {"a": torch.zeros(1, 3), "b": torch.zeros(1, 4)})
    with pytest.raises(ValueError, match="atol"):
        mixer_causality(MeanOverSequence(), rand_x(), atol=-1.0)


def _fast_form(name):
    """Scan-class presets (compiled derived scan: ~30 s compile each) use the hand-written
    recurrence in the default run; the compiled form is covered by the slow test."""
    return "recurrent" if get_preset(name).algebra == "scan" else "auto"


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_mixer_is_causal_bit_for_bit(name):
    form = _fast_form(name)
    cuts = [0, 4, 7, 10] if form == "recurrent" else None  # the derived recurrence is slow: a few cuts
    report = preset_mixer_causality(name, form=form, seq_len=12, cuts=cuts)
    assert report.causal, report
    assert report.max_leak == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in list_presets() if get_preset(n).algebra == "scan"])
def test_scan_preset_mixers_auto_form_causal(name):
    report = preset_mixer_causality(name, seq_len=12, cuts=[0, 4, 10])
    assert report.causal and report.max_leak == 0.0


@pytest.mark.parametrize("name,form", [("gated_deltanet", "chunk"), ("gla", "chunk"), ("softmax", "sdpa"),
                                       ("sca", "prefix_sum"), ("mamba2", "chunk")])
def test_preset_ops_are_causal(name, form):
    report = spec_causality(name, form=form, seq_len=19)  # chunk_size 8: T spans three chunks
    assert report.causal and report.max_leak == 0.0


def test_hf_llama_and_assocmem_models_are_causal():
    transformers = pytest.importorskip("transformers")
    from assocmem.models import HybridConfig, build_model

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1)
    ids = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(0))
    assert model_causality(transformers.LlamaForCausalLM(cfg).eval(), ids).causal
    hybrid = HybridConfig(d_model=32, vocab_size=64, layers="gdn,attn,sca", num_heads=2)
    model = build_model(hybrid).eval()
    report = model_causality(model, ids % model.config.vocab_size)
    assert report.causal and report.max_leak == 0.0
