"""Spectral steering of a block's update (seed 003 ST-1): circular as written, causal; oracles, decode."""
import math

import pytest
import torch

from assocmem.models import AssocMemConfig, AssocMemForCausalLM, HybridConfig, build_model, output_cache
from assocmem.models.steer import Steer, SteerConfig, causal_moving_average, circular_filter

F64 = dict(atol=1e-12, rtol=0)


def dft_lowpass_projector(T: int, k_c: int) -> torch.Tensor:
    """Re(Fᴴ M F) / T with the DFT matrix F[k, t] = e^{−2πikt/T} and M keeping the bins k and T − k for
    k ≤ k_c (a real signal's low band): the orthogonal projector onto frequencies ≤ k_c, [T, T]."""
    t = torch.arange(T, dtype=torch.float64)
    dft = torch.exp(-2j * math.pi * torch.outer(t, t) / T)                    # [k, t]
    k = torch.arange(T)
    keep = ((k <= k_c) | (k >= T - k_c)).to(torch.complex128)
    return (dft.conj().T @ torch.diag(keep) @ dft).real / T


@pytest.mark.parametrize("T,seq_len,cutoff,k_c", [(32, 32, 4, 4), (31, 31, 5, 5), (64, 32, 4, 8), (16, 32, 8, 4)])
def test_circular_lowpass_is_the_projection_onto_the_low_band_and_highpass_its_complement(T, seq_len, cutoff, k_c):
    u = torch.randn(2, T, 3, generator=torch.Generator().manual_seed(T), dtype=torch.float64)
    low = circular_filter(u, SteerConfig(band="lowpass", cutoff=cutoff, mode="circular", seq_len=seq_len))
    expected = torch.einsum("ts,bsc->btc", dft_lowpass_projector(T, k_c), u)
    torch.testing.assert_close(low, expected, **F64)
    high = circular_filter(u, SteerConfig(band="highpass", cutoff=cutoff, mode="circular", seq_len=seq_len))
    torch.testing.assert_close(low + high, u, **F64)


def test_causal_lowpass_is_the_moving_average_and_highpass_the_rest():
    u = torch.randn(2, 13, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    cfg = SteerConfig(band="lowpass", cutoff=8, mode="causal", seq_len=32)      # w = 4
    assert cfg.window == 4
    direct = torch.stack([u[:, max(0, t - 3):t + 1].sum(1) / 4 for t in range(13)], dim=1)
    low, _ = Steer(cfg)(u)
    torch.testing.assert_close(low, direct, **F64)
    torch.testing.assert_close(causal_moving_average(u, 4), direct, **F64)
    high, _ = Steer(cfg.model_copy(update={"band": "highpass"}))(u)
    torch.testing.assert_close(high, u - direct, **F64)


def test_causal_steer_decode_equals_the_full_filter():
    cfg = SteerConfig(band="highpass", cutoff=4, mode="causal", seq_len=32)     # w = 8
    steer, u = Steer(cfg), torch.randn(2, 11, 3, dtype=torch.float64)
    full, _ = steer(u)
    y, st = steer(u[:, :3])
    outs = [y]
    for t in range(3, 11):
        y, st = steer(u[:, t:t + 1], state=st)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), full, **F64)


def _hybrid(steer: dict, **kw) -> HybridConfig:
    """A two-layer hybrid with the extension steer on the layers of ``steer`` ({layer: options})."""
    extensions = [{"kind": "steer", "layers": [i], **options} for i, options in steer.items()]
    return HybridConfig(d_model=16, vocab_size=40, layers="attn,gdn", num_heads=2, mlp_ratio=2, extensions=extensions,
                        **kw)


def test_a_full_band_circular_steer_leaves_the_model_unchanged():
    torch.manual_seed(0)
    plain = build_model(_hybrid({})).double().eval()
    steered = build_model(_hybrid({0: {"band": "lowpass", "cutoff": 8, "mode": "circular", "seq_len": 16},
                                   1: {"band": "lowpass", "cutoff": 8, "mode": "circular", "seq_len": 16}})).double()
    steered.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 40, (2, 16))
    torch.testing.assert_close(steered.eval()(ids).logits, plain(ids).logits, **F64)
    cut = build_model(_hybrid({0: {"band": "lowpass", "cutoff": 2, "mode": "circular", "seq_len": 16}})).double()
    cut.load_state_dict(plain.state_dict())
    assert (cut.eval()(ids).logits - plain(ids).logits).abs().max() > 1e-3


def test_a_causally_steered_model_decodes_like_its_full_forward_and_round_trips(tmp_path):
    torch.manual_seed(1)
    steer = {0: {"band": "lowpass", "cutoff": 4, "mode": "causal", "seq_len": 16},
             1: {"band": "highpass", "cutoff": 2, "mode": "causal", "seq_len": 16}}
    model = build_model(_hybrid(steer)).double().eval()
    ids = torch.randint(0, 40, (2, 12))
    full = model(ids).logits
    out = model(ids[:, :4], use_cache=True)
    steps, cache = [out.logits], output_cache(out)
    for t in range(4, 12):
        out = model(ids[:, t:t + 1], cache=cache, use_cache=True)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-10, rtol=0)
    model.save_pretrained(tmp_path / "m")
    again = AssocMemForCausalLM.from_pretrained(tmp_path / "m").double().eval()
    steering = [(e.layers, e.band) for e in again.config.hybrid_config.extensions]
    assert steering == [([0], "lowpass"), ([1], "highpass")]
    torch.testing.assert_close(again(ids).logits, full, atol=0, rtol=0)


def test_circular_steer_refuses_decode_and_padding_is_refused():
    model = build_model(_hybrid({1: {"band": "lowpass", "cutoff": 2, "mode": "circular", "seq_len": 16}})).eval()
    out = model(torch.randint(0, 40, (1, 6)), use_cache=True)
    with pytest.raises(ValueError, match="no incremental decode"):
        model(torch.randint(0, 40, (1, 1)), cache=output_cache(out), use_cache=True)
    with pytest.raises(ValueError, match="without padding"):
        model(torch.randint(0, 40, (2, 6)), attention_mask=torch.tensor([[0, 1, 1, 1, 1, 1], [1] * 6]))


@pytest.mark.parametrize("steer,match", [
    ({5: {"band": "lowpass", "cutoff": 2, "mode": "causal", "seq_len": 16}}, r"extensions\[0\] \(steer\) layers \[5\] out of range"),
    ({0: {"band": "lowpass", "cutoff": 9, "mode": "causal", "seq_len": 16}}, "exceeds the Nyquist bin 8"),
    ({0: {"band": "bandpass", "cutoff": 2, "mode": "causal", "seq_len": 16}}, "lowpass"),
])
def test_bad_steering_is_refused(steer, match):
    with pytest.raises(ValueError, match=match):
        _hybrid(steer)
    assert AssocMemConfig  # the HF pair is importable beside the config
