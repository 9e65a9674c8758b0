"""The compiled chunk forms are device-agnostic: dynamo captures the same graphs from meta and CPU inputs.

A recording backend stands in for inductor (nothing is compiled, so this runs in the default suite):
it keeps the operators of every captured graph. The meta device holds shapes only, the CPU real values;
the same operator sequence means the source has no device-specific branch, so inductor lowers the
same graphs for a GPU (to Triton kernels).
"""
from __future__ import annotations

import pytest
import torch

from assocmem.mixers.ops import compiled as compiled_module
from assocmem.mixers.ops import delta, hebbian
from test_delta import make_inputs

OPS = {"gated_deltanet": (delta.chunk_delta_rule, "scalar"), "hebbian_key": (hebbian.chunk_hebbian, "key")}
CASES = [pytest.param("gated_deltanet"), pytest.param("hebbian_key", marks=pytest.mark.slow)]  # ~10 s of CPU each


@pytest.fixture
def recorded(monkeypatch):
    """compile=True with a backend that records each graph's call_function targets (no inductor)."""
    graphs: list[list[str]] = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    real = torch.compile
    monkeypatch.setattr(compiled_module, "_COMPILED", {})
    monkeypatch.setattr(compiled_module.torch, "compile", lambda fn: real(fn, backend=backend))
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()


@pytest.mark.parametrize("op", CASES)
def test_meta_and_cpu_inputs_give_the_same_graphs(op, recorded):
    fn, gate = OPS[op]
    x = make_inputs(37, gate, seed=0, with_state=False, dtype=torch.float32)
    with torch._dynamo.config.patch(recompile_limit=64):
        o_cpu, S_cpu = fn(**x, chunk_size=16, output_final_state=True, compile=True)
        cpu = list(recorded)
        recorded.clear()
        torch._dynamo.reset()
        o_meta, S_meta = fn(**{n: t.to("meta") for n, t in x.items()}, chunk_size=16, output_final_state=True,
                            compile=True)
    assert cpu and recorded == cpu
    assert o_meta.device.type == "meta" and o_meta.shape == o_cpu.shape and S_meta.shape == S_cpu.shape
    eager, _ = fn(**x, chunk_size=16)
    torch.testing.assert_close(o_cpu, eager)  # the recorded graphs ran (eagerly) to the eager values
