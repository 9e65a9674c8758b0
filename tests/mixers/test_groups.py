"""Groups of chunks (mixers/ops/groups.py) under autograd: the group outputs are concatenated once.

Writing each group's outputs into a slice of one shared tensor records a CopySlices node per group,
whose backward clones the whole output gradient, so fwd+bwd grew quadratically in T (per-token cost
doubled from 16k to 64k tokens). These tests read the autograd graph: no CopySlices node, and the
output gradient reaches every group's own node once.
"""
from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from assocmem.mixers.ops import delta, delta_chunk, dplr, groups, hebbian
from test_delta import make_inputs

# chunk op -> log_alpha kind (every chunk family: hebbian, delta scalar and per-key, diagonal plus low rank)
OPS = {
    "hebbian_none": (hebbian.chunk_hebbian, None),
    "hebbian_scalar": (hebbian.chunk_hebbian, "scalar"),
    "hebbian_key": (hebbian.chunk_hebbian, "key"),
    "gated_deltanet": (delta.chunk_delta_rule, "scalar"),
    "joint_key": (delta.chunk_delta_rule_joint, "key"),
    "kda": (delta.chunk_kda, "key"),
    "dplr_key": (dplr.chunk_dplr, "key"),
}


def _graph_names(root) -> list[str]:
    """Names of every node of the autograd graph reachable from ``root`` (each node once)."""
    seen, stack, names = set(), [root], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return names


@pytest.mark.parametrize("op", list(OPS))
def test_no_copy_slices_under_autograd(op, monkeypatch):
    """Five groups (one ragged) of two chunks: the output is one concatenation, no CopySlices node,
    and the values equal the no-grad path (which writes into one output tensor in place)."""
    monkeypatch.setattr(groups, "GROUP_TOKENS", 40)  # C = 16: groups of 2 chunks = 32 tokens (hebbian)
    monkeypatch.setattr(delta_chunk, "GROUP_TOKENS", 40)  # the delta class's own group size
    fn, gate = OPS[op]
    x = make_inputs(150, gate, seed=4)
    with torch.no_grad():
        o_ref, S_ref = fn(**x, chunk_size=16, output_final_state=True)
    leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    o, S = fn(**leaves, chunk_size=16, output_final_state=True)
    names = _graph_names(o.grad_fn)
    assert "CopySlices" not in names, f"{op}: group outputs written into slices under autograd"
    assert names.count("CatBackward0") >= 1
    assert_close(o, o_ref, rtol=0, atol=1e-12)
    assert_close(S, S_ref, rtol=0, atol=1e-12)


def test_one_group_needs_no_concatenation():
    """T within one group: the group's output is the output (no cat node)."""
    x = make_inputs(40, "scalar", seed=5)
    leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    o, _ = delta.chunk_delta_rule(**leaves, chunk_size=16)
    names = _graph_names(o.grad_fn)
    assert "CopySlices" not in names and "CatBackward0" not in names
