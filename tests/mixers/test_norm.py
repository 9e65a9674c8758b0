"""mixers/norm.py: the one RMSNorm. torch.nn.RMSNorm (written by others) is used where it gives the
formula x·rsqrt(mean(x²)+eps)·w bit for bit; elsewhere the formula runs as before."""
from __future__ import annotations

import pytest
import torch

from assocmem.mixers.norm import RMSNorm, rms_norm

SHAPES = [(2, 7, 64), (3, 5, 4, 6), (1, 1, 768), (4, 33, 1024), (2, 9, 2, 16)]


def _formula(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rmsnorm_is_the_formula_bit_for_bit_with_gradients(shape, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(shape[-1], generator=g, dtype=dtype)).requires_grad_(True)
    cot = torch.randn(shape, generator=g, dtype=dtype)
    ours, ref = rms_norm(x, w, 1e-6), _formula(x, w, 1e-6)
    torch.testing.assert_close(ours, ref, atol=0, rtol=0)
    for a, b in zip(torch.autograd.grad((ours * cot).sum(), (x, w)), torch.autograd.grad((ref * cot).sum(), (x, w))):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_module_equals_torch_rmsnorm(dtype):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(48, eps=1e-5).to(dtype), torch.nn.RMSNorm(48, eps=1e-5, dtype=dtype)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 11, 48, dtype=dtype)
    torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)
    assert list(ours.state_dict()) == ["weight"]  # checkpoints keep their key


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_inputs_keep_the_formula(dtype):
    """torch's kernel computes half inputs in float32 and rounds once: not the formula's result, which the
    blocks have always computed (in the input dtype) — so half inputs keep the formula."""
    x = torch.randn(4, 33, 1024).to(dtype)
    w = (1 + 0.1 * torch.randn(1024)).to(dtype)
    torch.testing.assert_close(rms_norm(x, w, 1e-6), _formula(x, w, 1e-6), atol=0, rtol=0)
    assert not torch.equal(torch.nn.functional.rms_norm(x, (1024,), w, 1e-6), _formula(x, w, 1e-6))


def test_autocast_activation_with_float32_weight_keeps_the_formula():
    """Under bf16 autocast the activations are bf16 and the weight float32: the formula promotes to float32."""
    norm = RMSNorm(64)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 5, 64).to(torch.bfloat16)
    y = norm(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, _formula(x, norm.weight, 1e-6), atol=0, rtol=0)
