"""The decode benchmark at toy sizes: structure, cache bytes (exact), ratios (no timing assertions)."""
from __future__ import annotations

import torch

from assocmem.training.bench.decode import bench_config, ratios, run_decode_bench


def test_bench_configs_share_width_and_depth():
    specs = {k: bench_config(k, 128, 12, 100).layer_specs() for k in ("attention", "gqa", "mla", "gdn75", "gdn")}
    assert [s.name for s in specs["gdn75"]].count("softmax") == 3
    assert [i for i, s in enumerate(specs["gdn75"]) if s.name == "softmax"] == [3, 7, 11]
    assert all(len(v) == 12 for v in specs.values())
    assert {s.layer.attention.num_kv_heads for s in specs["gqa"]} == {1} and specs["mla"][0].name == "mla"
    assert {s.layer.num_heads for v in specs.values() for s in v} == {2}


def test_decode_bench_cache_bytes_and_ratios():
    out = run_decode_bench((16, 48), d_model=32, n_layers=4, vocab=64, steps=2, warmup=1)
    rows = {(r["model"], r["context"]): r for r in out["rows"]}
    assert len(rows) == 10 and all(r["ms_per_token"] > 0 for r in rows.values())
    # attention: per layer 2·N·H·K float32 + N valid flags + one int64 position; d=32 -> 1 head of 32
    per_token = 4 * (2 * 1 * 32 * 4 + 1)
    assert rows[("attention", 48)]["cache_bytes_per_seq"] - rows[("attention", 16)]["cache_bytes_per_seq"] == \
        32 * per_token
    assert rows[("attention", 16)]["cache_bytes_per_seq"] == 16 * per_token + 4 * 8
    # MLA: per layer N·(d_c + d_R) float32 (kv_rank 256, rope_dim 32 of the mla preset) + N valid flags, whatever
    # the heads; GQA at one head is MHA
    grown = {m: rows[(m, 48)]["cache_bytes_per_seq"] - rows[(m, 16)]["cache_bytes_per_seq"] for m in ("mla", "gqa")}
    assert grown == {"mla": 32 * 4 * (4 * (256 + 32) + 1), "gqa": 32 * per_token}
    # pure GDN: state H·K·V + conv buffer 3·H(2K + V), float32, independent of the context
    gdn = 4 * 4 * (32 * 32 + 3 * 96)
    assert rows[("gdn", 16)]["cache_bytes_per_seq"] == rows[("gdn", 48)]["cache_bytes_per_seq"] == gdn
    assert rows[("gdn75", 16)]["cache_bytes_per_seq"] == 3 * gdn // 4 + rows[("attention", 16)]["cache_bytes_per_seq"] // 4
    assert set(out["ratios"]) == {f"{m}_latency_48_over_16" for m in ("attention", "gqa", "mla", "gdn75", "gdn")} | \
        {f"attention_over_{m}_at_48" for m in ("gqa", "mla", "gdn75", "gdn")}
    assert out["config"]["dtype"] == str(torch.float32)


def test_ratios_arithmetic():
    rows = [{"model": m, "context": c, "ms_per_token": t} for m, c, t in
            [("attention", 1, 2.0), ("attention", 4, 8.0), ("gdn", 1, 1.0), ("gdn", 4, 1.0)]]
    assert ratios(rows) == {"attention_latency_4_over_1": 4.0, "gdn_latency_4_over_1": 1.0,
                            "attention_over_gdn_at_4": 8.0}
