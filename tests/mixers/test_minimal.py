"""The minimal twins (mixers/ops/minimal.py) equal the fast chunk forms and the hand-written
recurrences: outputs, final states and input gradients, float64, odd lengths, K ≠ V, strong decay."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from assocmem.mixers.ops import delta, hebbian, minimal

TWINS = {  # twin: (fast chunk form, hand-written recurrence)
    "hebbian": (minimal.chunk_hebbian_minimal, hebbian.chunk_hebbian, hebbian.recurrent_hebbian),
    "delta": (minimal.chunk_delta_minimal, delta.chunk_delta_rule, delta.recurrent_delta_rule),
}


def _inputs(T, decay, gen, B=2, H=3, K=8, V=6):
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    x = dict(q=rnd(B, T, H, K), k=F.normalize(rnd(B, T, H, K), dim=-1), v=rnd(B, T, H, V),
             beta=torch.sigmoid(rnd(B, T, H)), initial_state=0.5 * rnd(B, H, K, V))
    if decay == "mild":
        x["log_alpha"] = F.logsigmoid(rnd(B, T, H) + 3.0)
    elif decay == "strong":
        x["log_alpha"] = -5.0 * torch.rand(B, T, H, generator=gen, dtype=torch.float64)  # α down to e^-5 a token
    return {n: t.requires_grad_(True) for n, t in x.items()}


def _run(fn, x, **kw):
    o, S = fn(**x, **kw)
    cot = torch.randn(o.shape, generator=torch.Generator().manual_seed(7), dtype=o.dtype)
    grads = torch.autograd.grad((o * cot).sum() + S.sum(), list(x.values()))
    return [o, S, *grads]


@pytest.mark.parametrize("twin", list(TWINS))
@pytest.mark.parametrize("decay", ["none", "mild", "strong"])
@pytest.mark.parametrize("T", [1, 17, 53])
def test_twin_equals_fast_form_and_recurrence(twin, decay, T):
    slow, fast, recurrent = TWINS[twin]
    x = _inputs(T, decay, torch.Generator().manual_seed(T))
    got = _run(slow, x, chunk_size=16)
    for other in (_run(fast, x, chunk_size=16, output_final_state=True),
                  _run(recurrent, x, output_final_state=True)):
        for a, b in zip(got, other):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fn", [minimal.chunk_hebbian_minimal, minimal.chunk_delta_minimal])
def test_a_twin_stays_minimal(fn):
    """Where a reader starts: each twin fits in 50 lines (with its docstring)."""
    assert len(inspect.getsource(fn).splitlines()) <= 50
