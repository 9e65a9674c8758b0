"""The causality probe on seed 003's ST-1 components: it flags FOH and steering as written (circular)
and passes their causal forms."""
import torch

from assocmem.mixers.foh import FourierOnlyAttention
from assocmem.models import HybridConfig, build_model
from assocmem.probes.causality import mixer_causality, model_causality


def test_circular_foh_leaks_from_position_0_and_causal_foh_is_causal_to_rounding():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 4, dtype=torch.float64)
    circular = mixer_causality(FourierOnlyAttention(4, seq_len=16, mode="circular").double(), x)
    assert not circular.causal and circular.first_leak == 0 and circular.max_leak > 1e-2
    causal = FourierOnlyAttention(4, seq_len=16, mode="causal").double()
    # the FFT convolution is causal in exact arithmetic; its rounding lets a changed future move an earlier
    # output by ~1e-16 relative (float64), so this form is checked at 1e-12, a million times below any leak
    report = mixer_causality(causal, x, atol=1e-12)
    assert report.causal and report.max_leak < 1e-12


def _steered(mode: str) -> torch.nn.Module:
    torch.manual_seed(0)
    steer = [{"kind": "steer", "layers": [0], "band": "lowpass", "cutoff": 2, "mode": mode, "seq_len": 16},
             {"kind": "steer", "layers": [1], "band": "highpass", "cutoff": 4, "mode": mode, "seq_len": 16}]
    return build_model(HybridConfig(d_model=16, vocab_size=40, layers="attn", n_layers=2, num_heads=2,
                                    mlp_ratio=2, extensions=steer)).double().eval()


def test_steering_as_written_leaks_and_causal_steering_is_causal_bit_for_bit():
    ids = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(1))
    circular = model_causality(_steered("circular"), ids)
    assert not circular.causal and circular.first_leak == 0
    causal = model_causality(_steered("causal"), ids)
    assert causal.causal and causal.max_leak == 0.0
