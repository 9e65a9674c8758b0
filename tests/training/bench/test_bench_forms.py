"""`assocmem bench mixers` at toy sizes: row structure, JSON keys, ratio lines (no timing assertions)."""
import json

import pytest
import torch

from assocmem.training.bench.forms import markdown_table, ratio_table, run_bench
from assocmem.training.bench.timing import measure_round_robin, time_round_robin
from assocmem.mixers.verify import make_case
from assocmem.mixers.presets import get_preset

KEYS = {"family", "impl", "T", "mode", "ms", "gflops", "peak_mb", "saved_mb", "compile_s"}


def test_rows_cover_every_form_and_mode_once():
    rows = run_bench(families=("gla",), Ts=(64,), modes=("fwd", "fwdbwd"), log=lambda *_: None)
    assert rows[0]["family"] == "matmul" and rows[0]["gflops"] > 0
    body = rows[1:]
    assert all(set(r) == KEYS for r in body)
    json.dumps(rows)  # JSON-ready
    seen = {(r["impl"], r["mode"]) for r in body}
    assert len(seen) == len(body)  # one row per (impl, mode)
    impls = {r["impl"] for r in body}
    assert {"derived", "chunk"} <= impls and any(i.startswith("recurrent") for i in impls)
    for r in body:
        assert r["ms"] > 0
        # GFLOP/s only for the chunk form's forward; saved bytes only for forward+backward (not the derivation)
        assert (r["gflops"] is not None) == (r["impl"] == "chunk" and r["mode"] == "fwd")
        assert (r["saved_mb"] is not None) == (r["mode"] == "fwdbwd" and r["impl"] != "derived")
    lines = ratio_table(rows)
    assert len(lines) == 2 * (len(impls) - 1)  # chunk against every other implementation, per mode
    assert all("chunk is" in line for line in lines)
    table = markdown_table(rows).splitlines()
    assert len(table) == 2 + len(impls)  # header, rule, one line per implementation (both modes)
    chunk = next(line for line in table if "| chunk |" in line).split("|")
    assert chunk[1].strip() == "gla" and chunk[2].strip() == "64" and "%" in chunk[6]
    assert table[2].split("|")[3].strip() == "chunk"  # fast forms before the references


def test_round_robin_times_every_implementation_and_counts_saved_bytes():
    spec = get_preset("gla")
    case = make_case(spec, B=1, T=32, H=2, K=8, V=8)
    inputs = {n: t.detach() for n, t in case.tensors.items()}
    from assocmem.mixers.lower import lower

    fns = {"chunk": lower(spec, "chunk").fn, "uncounted": lower(spec, "chunk").fn}
    out = measure_round_robin(fns, inputs, "fwdbwd", repeats=2, count_saved={"uncounted": False})
    assert set(out) == {"chunk", "uncounted"}
    for ms, peak_mb, _ in out.values():
        assert ms > 0 and peak_mb >= 0
    assert out["chunk"][2] > 0 and out["uncounted"][2] is None


def test_time_round_robin_interleaves_calls():
    order = []

    def call(name):
        def f():
            order.append(name)
            return {"a": 1.0, "b": 3.0}[name] + len(order) * 1e-3
        return f

    med = time_round_robin({"a": call("a"), "b": call("b")}, rounds=3, warmup=2)
    assert order == ["a", "a", "b", "b"] + ["a", "b"] * 3  # warm-ups, then one call of each per round
    assert med == {"a": 1.0 + 7e-3, "b": 3.0 + 8e-3}  # medians of the three timed calls


def test_delta_rows_report_the_chunk_size_they_run():
    """The delta class gets a row at the peers' chunk size next to its default, and each chunk row's
    GFLOP/s counts the FLOPs of the C it ran (C = K/2 = 32 by default at K = 64)."""
    from assocmem.training.bench.forms import PEER_CHUNK, chunk_flops, chunk_size_used

    spec = get_preset("gated_deltanet")
    assert chunk_size_used(spec, "chunk", 64) == 32 and chunk_size_used(spec, f"chunk C={PEER_CHUNK}", 64) == 64
    assert chunk_size_used(get_preset("mamba2"), "chunk", 64) == 64
    rows = run_bench(families=("gated_deltanet",), Ts=(128,), modes=("fwd",), log=lambda *_: None,
                     only=("chunk",))
    by_impl = {r["impl"]: r for r in rows[1:]}
    assert {"chunk", f"chunk C={PEER_CHUNK}"} <= set(by_impl)
    for impl, C in (("chunk", 32), (f"chunk C={PEER_CHUNK}", PEER_CHUNK)):
        r = by_impl[impl]
        flops = chunk_flops("gated_deltanet", 1, 128, 4, 64, 64, C)
        assert abs(r["gflops"] - flops / (r["ms"] / 1e3) / 1e9) < 1e-6 * r["gflops"]


def test_median_rows_and_ratio_ranges_over_processes():
    """--processes: per row the (lower) median ms of the runs with its min and max, and each ratio
    line gives its range over the runs."""
    from assocmem.training.bench.forms import median_rows

    def run(chunk_ms, peer_ms):
        base = dict(family="gated_deltanet", T=2048, mode="fwd", gflops=None, peak_mb=1.0, saved_mb=None)
        return [{**base, "impl": "chunk", "ms": chunk_ms}, {**base, "impl": "transformers:x", "ms": peer_ms}]

    runs = [run(8.0, 16.0), run(10.0, 15.0), run(7.0, 21.0)]
    rows = {r["impl"]: r for r in median_rows(runs)}
    assert (rows["chunk"]["ms"], rows["chunk"]["ms_min"], rows["chunk"]["ms_max"]) == (8.0, 7.0, 10.0)
    assert rows["transformers:x"]["ms"] == 16.0
    (line,) = ratio_table(list(rows.values()), runs)
    assert "2.00x faster than transformers:x" in line and "(range 1.50-3.00 over 3 processes)" in line


@pytest.mark.slow
def test_compiled_rows_time_their_first_call_and_compare_with_eager():
    rows = run_bench(families=("gated_deltanet",), Ts=(64,), modes=("fwd",), log=lambda *_: None,
                     only=("chunk",), compiled=True)
    by_impl = {r["impl"]: r for r in rows[1:]}
    assert by_impl["chunk (compiled)"]["compile_s"] > 0 and by_impl["chunk"]["compile_s"] is None
    assert by_impl["chunk (compiled)"]["gflops"] > 0
    assert any("chunk (compiled) is" in line and line.rstrip().endswith("than chunk") for line in ratio_table(rows))
    assert "| chunk (compiled) (first call " in markdown_table(rows)
