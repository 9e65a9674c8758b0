"""`assocmem bench decode`: per-token decode latency against context length.

Models of the same width and depth: pure attention (MHA), the same with grouped KV heads (GQA,
H/4 kv heads), multi-head latent attention (MLA, DeepSeek-V2: a cache of one latent of d_c + d_R
floats per token for all heads), a 75% Gated DeltaNet hybrid (attention at layers 3, 7, 11 of 12,
thesis Table 4.1) and pure GDN.
For each context length N the cache is put in the state it has after N tokens
and then `steps` tokens are decoded one at a time. ms_per_token is the median
latency of one decode step (one new token for each of the `batch` sequences);
all (model, context) pairs take their steps in turn, so they see the same load.

- attention layers get a cache of N random keys/values (MLA: latents and rotary keys; their decode
  cost depends only on N, not on the values);
- recurrent layers keep the fixed-size state of a short real prompt (their
  size does not depend on N, which is the point).

Cache bytes per sequence are read off the cache after the N tokens. Targets:
pure-GDN latency flat within 1.2x from 1k to 16k; the 75% hybrid at
16k at least 2x faster per token than pure attention. Timings are ratios within
one run on a noisy machine.
"""
from __future__ import annotations

import statistics
import time

import torch

from assocmem.mixers.attention import AttentionState
from assocmem.mixers.latent_attention import LatentState
from assocmem.models import HybridConfig, build_model, output_cache

MODELS = {
    "attention": dict(layers="attn"),
    "gqa": dict(layers="attn"),  # num_kv_heads = H / 4 (at least 1), bench_config
    "mla": dict(layers="mla"),  # multi-head latent attention: the cache holds d_c + d_R floats per token
    "gdn75": dict(layers="gdn", attention_layers=[3, 7, 11]),
    "gdn": dict(layers="gdn"),
}


def bench_config(kind: str, d_model: int, n_layers: int, vocab: int) -> HybridConfig:
    spec = dict(MODELS[kind])
    if "attention_layers" in spec:  # keep Table 4.1's 75% placement (every 4th layer) at any depth
        spec["attention_layers"] = [i for i in range(n_layers) if i % 4 == 3]
    heads = max(1, d_model // 64)
    if kind == "gqa":
        spec["overrides"] = {"attn": {"attention": {"num_kv_heads": max(1, heads // 4)}}}
    return HybridConfig(d_model=d_model, vocab_size=vocab, n_layers=n_layers, num_heads=heads, mlp_ratio=4.0, **spec)


def _random_pairs(st: AttentionState, n: int, gen: torch.Generator) -> AttentionState:
    B, Hkv, _, K = st.keys.shape
    keys = torch.randn(B, Hkv, n, K, generator=gen).to(st.keys.dtype)
    values = torch.randn(B, Hkv, n, st.values.shape[-1], generator=gen).to(st.values.dtype)
    return AttentionState(keys, values, torch.ones(B, n, dtype=torch.bool), torch.full((B,), n, dtype=torch.long))


def _random_latents(st: LatentState, n: int, gen: torch.Generator) -> LatentState:
    B, _, C = st.latent.shape
    latent = torch.randn(B, n, C, generator=gen).to(st.latent.dtype)
    rope_keys = torch.randn(B, n, st.rope_keys.shape[-1], generator=gen).to(st.rope_keys.dtype)
    return LatentState(latent, rope_keys, torch.ones(B, n, dtype=torch.bool), torch.full((B,), n, dtype=torch.long))


# state type of a layer whose cache grows with the context -> a cache of n random tokens like it
GROWING_CACHES = {AttentionState: _random_pairs, LatentState: _random_latents}


def _fill_cache(cache, n: int, gen: torch.Generator) -> None:
    """Grow every attention layer's cache to n random tokens (``GROWING_CACHES``; recurrent states are left as
    they are)."""
    for i in range(len(cache.layers)):
        fill = GROWING_CACHES.get(type(cache[i]))
        if fill is not None:
            cache[i] = fill(cache[i], n, gen)
    cache.seen_tokens = n


@torch.inference_mode()
def prepared_cache(model, context: int, *, batch: int, gen: torch.Generator):
    """The cache after `context` tokens (see the module docstring) and its bytes per sequence."""
    prompt = torch.randint(0, model.config.vocab_size, (batch, 8), generator=gen)
    cache = output_cache(model(prompt))
    _fill_cache(cache, context, gen)
    return cache, cache.state_bytes() // batch


@torch.inference_mode()
def time_decode(nets: dict, contexts, *, batch: int, steps: int, warmup: int, seed: int = 0) -> list[dict]:
    """Median ms per decoded token for every (model, context). The steps are taken round-robin over
    all pairs, so that every pair sees the same machine load (the ratios are what matter)."""
    gen = torch.Generator().manual_seed(seed)
    runs = []
    for n in contexts:
        for kind, net in nets.items():
            cache, size = prepared_cache(net, n, batch=batch, gen=gen)
            token = torch.randint(0, net.config.vocab_size, (batch, 1), generator=gen)
            runs.append({"model": kind, "context": n, "net": net, "cache": cache, "token": token, "size": size,
                         "times": []})
    for _ in range(warmup + steps):
        for run in runs:
            t0 = time.perf_counter()
            logits = run["net"](run["token"], cache=run["cache"]).logits
            run["times"].append(time.perf_counter() - t0)
            run["token"] = logits[:, -1:].argmax(-1)
    return [{"model": r["model"], "context": r["context"], "ms_per_token": 1e3 * statistics.median(r["times"][warmup:]),
             "cache_bytes_per_seq": r["size"]} for r in runs]


def run_decode_bench(contexts=(1024, 4096, 16384), *, d_model: int = 512, n_layers: int = 12, vocab: int = 32000,
                     batch: int = 1, steps: int = 20, warmup: int = 3, dtype: torch.dtype = torch.float32,
                     models=tuple(MODELS)) -> dict:
    """Run the benchmark; returns {"config": {...}, "rows": [...], "ratios": {...}}."""
    nets = {}
    for kind in models:
        torch.manual_seed(0)
        nets[kind] = build_model(bench_config(kind, d_model, n_layers, vocab), dtype=dtype).eval()
    rows = time_decode(nets, contexts, batch=batch, steps=steps, warmup=warmup)
    for r in rows:
        print(f"  {r['model']:10s} context {r['context']:6d}: {r['ms_per_token']:8.2f} ms/token, "
              f"cache {r['cache_bytes_per_seq'] / 2**20:9.2f} MiB/seq", flush=True)
    config = dict(contexts=list(contexts), d_model=d_model, n_layers=n_layers, vocab=vocab, batch=batch,
                  steps=steps, warmup=warmup, dtype=str(dtype), threads=torch.get_num_threads())
    return {"config": config, "rows": rows, "ratios": ratios(rows)}


def ratios(rows: list[dict]) -> dict:
    """Flatness of each model's latency (longest / shortest context) and speedups over attention."""
    by = {(r["model"], r["context"]): r["ms_per_token"] for r in rows}
    ctx = sorted({r["context"] for r in rows})
    out = {}
    for kind in sorted({r["model"] for r in rows}):
        out[f"{kind}_latency_{ctx[-1]}_over_{ctx[0]}"] = by[(kind, ctx[-1])] / by[(kind, ctx[0])]
        if kind != "attention" and ("attention", ctx[-1]) in by:
            out[f"attention_over_{kind}_at_{ctx[-1]}"] = by[("attention", ctx[-1])] / by[(kind, ctx[-1])]
    return out
