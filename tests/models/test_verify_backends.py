"""The whole model by backend "fla" against "torch" (models/verify_backends.py, ``verify --device cuda``),
run on CPU with FLA's naive references in place of its Triton kernels (mixers/external.fla_naive_kernels)."""
import types

import pytest
import torch

from assocmem.mixers.external import fla_naive_kernels
from assocmem.mixers.kernels import FlaEnv
from assocmem.models.verify_backends import PATTERNS, model_backend_pairs

KERNELS = fla_naive_kernels()
pytestmark = pytest.mark.skipif(KERNELS is None, reason="fla-core (FLA's naive references) is not installed")


def _env(kernels=None) -> FlaEnv:
    return FlaEnv(fla=True, kernels=kernels or KERNELS, device_type="cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16-autocast"])
def test_every_fla_class_runs_the_whole_model_as_torch_does(dtype):
    results = model_backend_pairs("cpu", dtype, env=_env())
    assert all(r.passed for r in results), [(r.pair, r.max_abs_error) for r in results if not r.passed]
    ran = {r.pair.split(":")[0].removeprefix("model ") for r in results}
    # FLA's chunk_delta_rule refuses float32 inputs (mixers/kernels.py fla_status): DeltaNet is left out there
    assert ran == (set(PATTERNS) - {"deltanet,attn"} if dtype == torch.float32 else set(PATTERNS))
    if dtype == torch.float32:
        assert max(r.max_abs_error for r in results) < 1e-5  # the same float32 sums in another order


def test_a_kernel_that_computes_something_else_fails_its_model_pair():
    def off(*args, **kwargs):  # FLA's GDN kernel, 10 % off in its output
        o, state = KERNELS.chunk_gated_delta_rule(*args, **kwargs)
        return o * 1.1, state

    wrong = types.SimpleNamespace(**{**vars(KERNELS), "chunk_gated_delta_rule": off})
    result, = model_backend_pairs("cpu", torch.float32, env=_env(wrong), patterns=("gated_deltanet,attn",))
    assert not result.passed and result.max_abs_error > 1e-3


def test_verify_device_cuda_prints_the_model_pairs(capsys):
    import argparse

    from assocmem.cli.mixers import _verify_cuda
    from assocmem.mixers.presets import get_preset

    rc = _verify_cuda([get_preset("gated_deltanet")], argparse.Namespace(seq_len=16, seed=0, json=None), env=_env())
    out = capsys.readouterr().out
    assert rc == 0 and "model gated_deltanet,attn: backend fla vs torch [cpu, float32]" in out
    assert "model rwkv7_dplr,attn: backend fla vs torch [cpu, bfloat16]" in out
