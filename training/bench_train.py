"""`assocmem bench train`: training throughput (tokens/s) of one model shape per mixer.

For each mixer the same hybrid shape is built (default: Zoology's MQAR model, 2 layers,
d_model 128, no MLP, vocab 8192) and trained on MQAR batches (L=256, K=16) exactly as
``assocmem train`` does it: ``CausalLMObjective`` (LM head on supervised positions),
backward, gradient clipping and an AdamW step. After ``warmup`` steps, every mixer takes
``steps`` timed steps in round-robin order, so all see the same machine load; tokens/s is
batch·L divided by the median step time. Timings are ratios within one run; nothing here
is asserted in tests.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

DEFAULT_MIXERS = ("attn", "gdn", "gla", "mamba2", "sca")


def _trainer(layers: str, args: argparse.Namespace):
    """A closure running one optimizer step of a fresh model with ``layers`` as every layer."""
    from assocmem.models import HybridConfig, build_model

    from .objective import CausalLMObjective
    from .tasks import mqar_arrays

    torch.manual_seed(0)
    heads = 1 if layers == "attn" else args.num_heads
    hc = HybridConfig(d_model=args.d_model, layers=layers, n_layers=args.n_layers, num_heads=heads,
                      mlp_ratio=args.mlp_ratio, vocab_size=args.vocab)
    objective = CausalLMObjective(build_model(hc), "supervised")
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
    from assocmem.mixers.bench import time_round_robin

    medians = time_round_robin({m: _trainer(m, args) for m in args.mixers}, args.steps, warmup=args.warmup)
    rows = []
    for m, med in medians.items():
        rows.append({"mixer": m, "median_step_s": med, "tokens_per_s": args.batch * args.seq_len / med})
        log(f"  {m:8s} {1e3 * med:9.1f} ms/step  {rows[-1]['tokens_per_s']:10,.0f} tokens/s")
    return rows


def register_train(kinds: argparse._SubParsersAction) -> None:
    """Add `train` to the `assocmem bench` subcommands."""
    p = kinds.add_parser("train", help="training tokens/s per mixer (MQAR model shape)", description=__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixers", nargs="+", default=list(DEFAULT_MIXERS), metavar="LAYER",
                   help=f"layer patterns, one model each (default: {' '.join(DEFAULT_MIXERS)})")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--num-heads", type=int, default=2, help="heads of the recurrent mixers (attention: 1)")
    p.add_argument("--mlp-ratio", type=float, default=0.0)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--num-kv-pairs", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps per mixer")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write config and rows as JSON")
    p.set_defaults(func=_train_bench)


def _train_bench(args: argparse.Namespace) -> int:
    for name in ("d_model", "n_layers", "num_heads", "vocab", "seq_len", "num_kv_pairs", "batch", "steps", "threads"):
        if getattr(args, name) < 1:
            print(f"assocmem bench train: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}",
                  file=sys.stderr)
            return 2
    if args.vocab <= args.seq_len:
        print(f"assocmem bench train: --vocab must exceed --seq-len (Zoology's MQAR draws keys and values "
              f"from the vocabulary), got --vocab {args.vocab} and --seq-len {args.seq_len}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    print(f"training throughput: d_model {args.d_model}, {args.n_layers} layers, L={args.seq_len}, "
          f"batch {args.batch}, {args.threads} thread(s)")
    rows = run_train_bench(args)
    if args.json:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
        args.json.write_text(json.dumps({"config": config, "rows": rows}, indent=2))
        print(f"wrote {args.json}")
    return 0
