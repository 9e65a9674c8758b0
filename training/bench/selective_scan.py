"""The selective class's block scan against a parallel associative (Hillis–Steele) scan, eager, forward and
backward: whether a parallel scan pays (mixers/lower.py records the answer).

    PYTHONPATH=... python -m assocmem.training.bench.selective_scan

The associative scan composes (log a₁, b₁) ∘ (log a₂, b₂) = (log a₁ + log a₂, exp(log a₂) b₁ + b₂) over
doubling offsets: log₂ T steps of O(T·K·V) work each, against the block scan's T steps of O(K·V).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from assocmem.mixers.ops.selective import scan_selective


def associative_scan(q, k, v, *, log_alpha, scale=1.0):
    """o of the selective recurrence from S_0 = 0 by the doubling scan (module docstring)."""
    a, b = log_alpha, k[..., :, None] * v[..., None, :]  # [B, T, H, K, V]
    step = 1
    while step < a.shape[1]:
        shift = lambda x: F.pad(x[:, :-step], (0, 0) * 3 + (step, 0))  # noqa: E731  x_{t−step}, 0 before the start
        b = b + torch.exp(a) * shift(b)
        a = a + shift(a)
        step *= 2
    return scale * torch.einsum("bthk,bthkv->bthv", q, b)


def main(shapes=((256, 16, 128), (1024, 16, 128)), repeats: int = 3) -> None:
    torch.manual_seed(0)
    for T, K, V in shapes:
        q, k, v, la = torch.randn(1, T, 1, K), torch.randn(1, T, 1, K), torch.randn(1, T, 1, V), -torch.rand(1, T, 1, K, V)
        block = lambda *x, **kw: scan_selective(*x, **kw)[0]  # noqa: E731
        torch.testing.assert_close(block(q, k, v, log_alpha=la, scale=1.0), associative_scan(q, k, v, log_alpha=la),
                                   atol=1e-4, rtol=1e-4)
        for name, fn in (("block scan", block), ("associative scan", associative_scan)):
            best = float("inf")
            for _ in range(repeats):
                xs = [t.clone().requires_grad_() for t in (q, k, v, la)]
                start = time.perf_counter()
                fn(xs[0], xs[1], xs[2], log_alpha=xs[3], scale=1.0).sum().backward()
                best = min(best, time.perf_counter() - start)
            print(f"T={T:5d} K={K} V={V}  {name:17s} forward+backward {best * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
