"""Fourier-Only Attention (seed 003 eq. 6) as written (circular) and causal: oracles, decode, refusals."""
import pytest
import torch

from assocmem.mixers.foh import (FourierOnlyAttention, causal_fft_conv, circular_fourier_filter,
                                 direct_causal_conv)

F64 = dict(atol=1e-12, rtol=0)


@pytest.mark.parametrize("T", [1, 2, 7, 64, 65])
def test_causal_fft_convolution_equals_the_direct_sum(T):
    gen = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, 3, generator=gen, dtype=torch.float64)
    h = torch.randn(T + 5, 3, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(causal_fft_conv(x, h), direct_causal_conv(x, h), **F64)


@pytest.mark.parametrize("T", [8, 9])
def test_circular_foh_equals_a_circulant_matrix_product(T):
    gen = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, 3, generator=gen, dtype=torch.float64)
    w_phi = torch.randn(T // 2 + 1, 3, generator=gen, dtype=torch.complex128)
    w = torch.fft.irfft(w_phi, n=T, dim=0)                                  # [T, d] the kernel of the filter
    idx = (torch.arange(T)[:, None] - torch.arange(T)[None, :]) % T          # C[t, s] = w[(t − s) mod T]
    circulant = w[idx]                                                       # [T, T, d]
    expected = torch.einsum("tsc,bsc->btc", circulant, x)
    torch.testing.assert_close(circular_fourier_filter(x, w_phi), expected, **F64)


def test_causal_foh_decode_equals_the_full_forward():
    torch.manual_seed(0)
    layer = FourierOnlyAttention(4, seq_len=12, mode="causal").double()
    x = torch.randn(2, 11, 4, dtype=torch.float64)
    full, state = layer(x)
    assert state.inputs.shape == (2, 11, 4)
    y, st = layer(x[:, :5])
    outs = [y]
    for t in range(5, 11):
        y, st = layer(x[:, t:t + 1], state=st)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), full, **F64)
    torch.testing.assert_close(full, direct_causal_conv(x, layer.kernel), **F64)
    assert layer.state_size(11) == 44
    with pytest.raises(ValueError, match="12 taps; 13 positions exceed it"):
        layer(x[:, :2], state=st)


def test_circular_foh_is_tied_to_its_length_and_has_no_decode():
    layer = FourierOnlyAttention(4, seq_len=10, mode="circular")
    assert tuple(layer.filter.shape) == (6, 4, 2)
    y, state = layer(torch.randn(1, 10, 4))
    assert state is None and y.shape == (1, 10, 4)
    with pytest.raises(ValueError, match="tied to T=10; got a sequence of length 9"):
        layer(torch.randn(1, 9, 4))
    with pytest.raises(ValueError, match="no incremental decode"):
        layer(torch.randn(1, 10, 4), state=object())
    with pytest.raises(ValueError, match="mode must be one of"):
        FourierOnlyAttention(4, seq_len=10, mode="bidirectional")
    with pytest.raises(ValueError, match=r"must be \[B, T, 4\]"):
        layer(torch.randn(10, 4))


def test_both_modes_start_from_the_same_kernel_law():
    """The circular filter starts as the rfft of an N(0, 1/T) kernel: its time kernel has that variance."""
    torch.manual_seed(0)
    circ = FourierOnlyAttention(256, seq_len=64, mode="circular")
    kernel = torch.fft.irfft(torch.view_as_complex(circ.filter.detach()), n=64, dim=0)
    assert kernel.var().item() == pytest.approx(1 / 64, rel=0.05)
    causal = FourierOnlyAttention(256, seq_len=64, mode="causal")
    assert causal.kernel.var().item() == pytest.approx(1 / 64, rel=0.05)
