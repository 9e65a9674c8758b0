"""Timing and memory of one call, and round-robin timing of several (the benches' measuring).

    time_call(fn, inputs, mode)        seconds of one forward (no grad) or forward + backward call
    time_round_robin(calls, rounds)    median seconds of calls taken in turn (one machine state for all)
    measure_round_robin(fns, ...)      median ms, peak RSS growth and saved-for-backward MB per form
    matmul_peak_gflops()               the fp32 matmul peak of this run (the denominator of "% of peak")

Timings are ratios within one run on a noisy machine; nothing here is asserted in tests.
"""
from __future__ import annotations

import ctypes
import statistics
import threading
import time
from typing import Callable

import torch

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: peak memory is then an upper bound
        pass


class _PeakRSS:
    """Samples the resident set size in a thread while a call runs."""

    def __enter__(self):
        _trim()
        self.base = self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.0005):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())
        self.mb = (self.peak - self.base) / 2**20


def time_call(fn: Callable, inputs: dict, mode: str, pack=None) -> float:
    """Seconds of one forward (no grad) or forward + backward call; ``pack`` hooks saved tensors."""
    leaves = {n: (t.detach().requires_grad_(mode == "fwdbwd")) for n, t in inputs.items()}
    q, k, v = leaves.pop("q"), leaves.pop("k"), leaves.pop("v")
    t0 = time.perf_counter()
    if mode == "fwd":
        with torch.no_grad():
            fn(q, k, v, **leaves)
    else:
        if pack is not None:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                o, _ = fn(q, k, v, **leaves)
        else:
            o, _ = fn(q, k, v, **leaves)
        o.backward(torch.randn_like(o))  # a dense cotangent (a stride-0 one takes slow bmm paths)
    if q.device.type == "cuda":  # kernels run asynchronously: wait for them before reading the clock
        torch.cuda.synchronize(q.device)
    return time.perf_counter() - t0


def _memory(fn: Callable, inputs: dict, mode: str, count_saved: bool) -> tuple[float, float | None]:
    """(peak RSS growth MB, saved-for-backward MB or None) of one call, with the RSS sampler running.
    torch.func (the derivation) refuses saved-tensor hooks, so ``count_saved`` is off for it."""
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    hook = pack if mode == "fwdbwd" and count_saved else None
    with _PeakRSS() as mem:
        time_call(fn, inputs, mode, hook)
    return mem.mb, (saved[0] / 2**20 if hook is not None else None)


def measure(fn: Callable, inputs: dict, mode: str, repeats: int, count_saved: bool = True):
    """(median ms, peak MB, saved MB) of one implementation: see ``measure_round_robin``."""
    return measure_round_robin({"fn": fn}, inputs, mode, repeats, {"fn": count_saved})["fn"]


def time_round_robin(calls: dict[str, Callable[[], float]], rounds: int, warmup: int = 1) -> dict[str, float]:
    """{name: median seconds} of calls that each time themselves and return seconds.

    1. ``warmup`` untimed calls of each.
    2. ``rounds`` rounds; each round makes one call of every entry in turn, so entries
       compared as a ratio see the same machine state (load, allocator heap, caches)
       instead of whatever each saw minutes apart.
    """
    for call in calls.values():
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(call())
    return {name: statistics.median(ts) for name, ts in times.items()}


def measure_round_robin(fns: dict[str, Callable], inputs: dict, mode: str, repeats: int,
                        count_saved: dict[str, bool] | None = None) -> dict[str, tuple[float, float, float | None]]:
    """{name: (median ms, peak MB, saved MB)}: the calls timed by ``time_round_robin`` (one
    warm-up, ``repeats`` rounds), then one more call each for memory. The RSS sampler thread
    runs only then, so it never competes with the timed calls for the cores."""
    count_saved = count_saved or {}
    secs = time_round_robin({n: (lambda f=fn: time_call(f, inputs, mode)) for n, fn in fns.items()}, repeats)
    out = {}
    for name, fn in fns.items():
        peak_mb, saved_mb = _memory(fn, inputs, mode, count_saved.get(name, True))
        out[name] = (1e3 * secs[name], peak_mb, saved_mb)
    return out


def matmul_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(f: Callable) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0
