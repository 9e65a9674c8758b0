"""`assocmem bench train`: training throughput (tokens/s) of one model shape per mixer.

For each mixer the same hybrid shape is built (default: Zoology's MQAR model, 2 layers,
d_model 128, no MLP, vocab 8192) and trained on MQAR batches (L=256, K=16) exactly as
``assocmem train`` does it: ``CausalLMObjective`` (LM head on supervised positions),
backward, gradient clipping and an AdamW step. After ``warmup`` steps, every mixer takes
``steps`` timed steps in round-robin order, so all see the same machine load; tokens/s is
batch·L divided by the median step time. With ``--compile`` every mixer is timed twice, eager
and with its decoder compiled in place as ``train.compile: true`` does it ("MIXER (compiled)";
the warm-up steps compile). Timings are ratios within one run; nothing here is asserted in tests.
"""
from __future__ import annotations

import argparse
import time

import torch

from assocmem.models import HybridConfig, build_model

from ..objective import CausalLMObjective
from .timing import time_round_robin

DEFAULT_MIXERS = ("attn", "gdn", "gla", "mamba2", "sca")


def _trainer(layers: str, args: argparse.Namespace, compile: bool = False):
    """A closure running one optimizer step of a fresh model with ``layers`` as every layer
    (``compile``: its decoder torch.compile'd in place, as ``train.compile``)."""
    from ..tasks import mqar_arrays  # (imports datasets: not at registration, so `assocmem bench` runs without it)

    torch.manual_seed(0)
    heads = 1 if layers == "attn" else args.num_heads
    hc = HybridConfig(d_model=args.d_model, layers=layers, n_layers=args.n_layers, num_heads=heads,
                      mlp_ratio=args.mlp_ratio, vocab_size=args.vocab)
    model = build_model(hc)
    if compile:
        model.get_decoder().compile()
    objective = CausalLMObjective(model, "supervised")
    opt = torch.optim.AdamW(objective.parameters(), lr=1e-3, weight_decay=0.1)
    x, y = (torch.from_numpy(a) for a in mqar_arrays(args.batch, args.seq_len, args.num_kv_pairs,
                                                      vocab_size=args.vocab, seed=0))

    def step() -> float:
        t0 = time.perf_counter()
        loss_sum, count, _ = objective(x, y)
        (loss_sum / count).backward()
        torch.nn.utils.clip_grad_norm_(objective.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    return step


def run_train_bench(args: argparse.Namespace, log=print) -> list[dict]:
    """One row per mixer: median step seconds and tokens/s (all mixers timed in turn)."""
    trainers = {m: _trainer(m, args) for m in args.mixers}
    if args.compile:
        trainers.update({f"{m} (compiled)": _trainer(m, args, compile=True) for m in args.mixers})
    medians = time_round_robin(trainers, args.steps, warmup=args.warmup)
    rows = []
    for m, med in medians.items():
        rows.append({"mixer": m, "median_step_s": med, "tokens_per_s": args.batch * args.seq_len / med})
        log(f"  {m:20s} {1e3 * med:9.1f} ms/step  {rows[-1]['tokens_per_s']:10,.0f} tokens/s")
    return rows
