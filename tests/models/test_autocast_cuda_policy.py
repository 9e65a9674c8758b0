"""Every preset model and hybrid trains a step under CUDA's autocast casts, reproduced on CPU.

Under ``torch.autocast("cuda", bfloat16)`` norms and reductions run in float32 and linears and
convolutions in bf16, so q, k and v of a layer reach its op in different dtypes (the crash of
every delta-family hybrid on CUDA). ``cuda_autocast_policy`` (tests/cuda_autocast.py) applies
CUDA's op lists on CPU; each tiny preset and each hybrid pattern trains one AdamW step under it
and under plain CPU autocast (forward inside autocast, backward outside, as the AMP recipe has
it), with a finite loss, finite gradients on every parameter and finite updated weights. The GDN
hybrid also trains with left padding, with gradient checkpointing, and on packed documents
(cu_seqlens).
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from cuda_autocast import CUDAAutocastPolicy  # tests/cuda_autocast.py (tests/ is on sys.path via its conftest)

from assocmem.mixers.lower import lower
from assocmem.mixers.presets import get_preset, list_presets
from assocmem.models import HybridConfig, build_model
from assocmem.models.presets import list_model_presets

B, T, VOCAB = 2, 24, 64
# the tiny presets carry every layer pattern of the full-size ones (models/presets.py)
PRESETS = [p for p in list_model_presets() if "-tiny" in p]
LENGTH = {"st1-tiny": 128}  # circular steering and FOH are tied to their sequence length
# the hybrids the issue found failing on CUDA, as layer patterns (mixers/presets.py names)
HYBRIDS = ["gated_deltanet,attn", "par(gated_deltanet,attn)", "deltanet,linear_attention", "kda,attn",
           "rwkv7_dplr,attn"]
# every mixer preset next to attention; the scan class compiles its derived step (slow on CPU)
MIXERS = [pytest.param(f"{p},attn", id=f"{p},attn", marks=pytest.mark.slow if lower(get_preset(p)).name == "scan"
                       else ()) for p in list_presets() if f"{p},attn" not in HYBRIDS]


def tiny(layers: str) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {"overrides": {"sca": {"num_heads": 2}}} if "sca" in layers else {}
    return build_model(HybridConfig(layers=layers, d_model=32, vocab_size=VOCAB, num_heads=2, mlp_ratio=2.0, **extra))


def preset(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name)


@contextlib.contextmanager
def plain_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield None


def train_step(model, policy, ids, **kwargs):
    """One AdamW step with the forward under ``policy``; returns the loss."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with policy() as mode:
        loss = model(ids, labels=ids, **kwargs).loss
    if mode is not None:
        assert mode.calls["lower"] and mode.calls["float32"], "the policy cast nothing"
    loss.backward()
    assert torch.isfinite(loss), float(loss)
    for name, p in model.named_parameters():
        assert p.grad is None or bool(torch.isfinite(p.grad).all()), f"non-finite gradient of {name}"
    assert any(p.grad is not None and bool(p.grad.ne(0).any()) for p in model.parameters())
    opt.step()
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return loss


def ids(vocab: int, rows: int = B, length: int = T) -> torch.Tensor:
    return torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(1))


@pytest.fixture(params=["cuda_policy", "cpu_autocast"])
def policy(request, cuda_autocast):
    return cuda_autocast if request.param == "cuda_policy" else plain_autocast


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", PRESETS)
def test_tiny_preset_trains_a_step(name, policy):
    model = preset(name)
    train_step(model, policy, ids(model.config.vocab_size, length=LENGTH.get(name, T)))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("layers", HYBRIDS + MIXERS)
def test_hybrid_trains_a_step(layers, policy):
    train_step(tiny(layers), policy, ids(VOCAB))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_gdn_hybrid_left_padding(checkpointing, policy):
    """Left padding goes through models/blocks.run_mixer (each row's real tokens on their own).

    torch.utils.checkpoint recomputes a block in the backward under the autocast state of its forward,
    which it restores for torch.autocast; the policy's TorchFunctionMode it does not see, so the
    recomputation enters it again (``context_fn``), as CUDA autocast is restored on a GPU."""
    model = tiny("gated_deltanet,attn")
    if checkpointing:
        recompute = CUDAAutocastPolicy if policy is not plain_autocast else contextlib.nullcontext
        kwargs = {"use_reentrant": False, "context_fn": lambda: (contextlib.nullcontext(), recompute())}
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.24
        if enable is None:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            enable(activation_checkpointing_kwargs=kwargs)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, :5] = 0
    train_step(model, policy, ids(VOCAB), attention_mask=mask)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("layers", ["gated_deltanet,attn", "sca,attn"])
def test_packed_documents(layers, policy):
    cu = torch.tensor([0, 7, 15, 24, 31])  # documents of 7, 8, 9 and 7 tokens in one row
    train_step(tiny(layers), policy, ids(VOCAB, 1, 31), cu_seqlens=cu)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("layers", ["gated_deltanet,attn", "sca,attn"])
def test_left_padded_decode(layers, policy):
    """Prefill of a left-padded batch, then decode steps: the caches written under the policy are read back."""
    model = tiny(layers).eval()
    mask = torch.ones(B, 8, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad(), policy():
        out = model.generate(ids(VOCAB, length=8), attention_mask=mask, max_new_tokens=3, do_sample=False)
    assert out.shape == (B, 11)


def test_the_policy_reproduces_cudas_casts(cuda_autocast):
    """Linears in bf16, norms and reductions in float32, elementwise ops as called; autocast off: as called."""
    x = torch.randn(2, 4)
    w = torch.randn(3, 4)
    with cuda_autocast():
        assert torch.nn.functional.linear(x, w).dtype == torch.bfloat16
        h = x.bfloat16()
        assert torch.nn.functional.rms_norm(h, (4,)).dtype == torch.float32
        assert (h * h).sum(-1).dtype == torch.float32
        assert torch.softmax(h, -1).dtype == torch.float32
        assert (h + 1).dtype == torch.bfloat16
        with torch.autocast("cpu", enabled=False):
            assert torch.nn.functional.linear(x, w).dtype == torch.float32
            assert h.sum().dtype == torch.bfloat16
