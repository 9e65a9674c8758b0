"""`assocmem demo`: one spec's path from derivation to a trained hybrid, on built-in defaults.

    1. derive   the published Gated DeltaNet, its "joint" variant, SCA and a user spec
    2. verify   each against its hand-written rule, fast forms and external references
    3. train    a tiny GDN + attention hybrid on MQAR (Zoology's task) for a few hundred steps
    4. probe    the trained model for causality (perturb the future, nothing may move)

Everything is written under a new folder (runs/demo, runs/demo-2, ...); nothing is overwritten.
A few minutes on a 2-core CPU.
"""
from __future__ import annotations

import json
from pathlib import Path

USER_SPEC = {
    "name": "huber_key_momentum",
    "memory": {"kind": "matrix"},
    "bias": {"kind": "huber", "delta": 0.5},
    "retention": {"kind": "l2_decay", "gate": "key"},
    "optimizer": {"kind": "momentum", "eta": 0.8, "lr": 0.5},
}


def fresh_dir(base: Path) -> Path:
    """``base`` if it does not exist, else the first free base-2, base-3, ..."""
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def _derive_and_verify(out: Path) -> bool:
    from assocmem.memories import derive
    from assocmem.mixers import MixerSpec, get_preset
    from assocmem.mixers.verify import print_table, verify

    specs = [get_preset(n) for n in ("gated_deltanet", "gated_deltanet_joint", "sca")]
    specs.append(MixerSpec.model_validate(USER_SPEC))
    _section("1. derive: the per-token update of each spec, from autograd")
    for spec in specs:
        step = derive(spec)
        print(f"{spec.name:22s} [{step.cls}]  {step.describe()}")
    _section("2. verify: derived vs hand-written vs fast forms vs external references (float64)")
    results = [r for spec in specs for r in verify(spec, T=33)]
    print_table(results)
    (out / "verify.json").write_text(json.dumps([r.as_json() for r in results], indent=2))
    return all(r.passed for r in results)


def _train(out: Path, steps: int) -> dict:
    from assocmem.training.config import config_from_dict
    from assocmem.training.loop import train

    cfg = config_from_dict({
        "name": "mqar-gdn-attn", "output_dir": str(out), "seed": 0,
        "model": {"hybrid": {"d_model": 64, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}},
        "data": {"kind": "mqar", "seq_len": 64, "num_kv_pairs": 4, "vocab_size": 256,
                 "num_train": 20000, "num_eval": 300},
        "optim": {"lr": 3e-3, "warmup_steps": 20},
        "train": {"steps": steps, "batch_size": 32, "eval_every": max(steps // 3, 1), "log_every": 10,
                  "checkpoint_every": 0, "progress": True},
    })
    _section(f"3. train: 2-layer GDN + attention hybrid, MQAR (L=64, K=4), {steps} steps")
    summary = train(cfg)
    ev = summary.get("eval") or {}
    print(f"MQAR eval accuracy {ev.get('accuracy', float('nan')):.3f}, loss {ev.get('loss', float('nan')):.3f} "
          f"-> {out / 'mqar-gdn-attn'}")
    return summary


def _probe(out: Path) -> bool:
    import torch

    from assocmem.models.hf_load import load_causal_lm

    from .causality import model_causality

    _section("4. probe: causality of the trained hybrid (perturb every future token)")
    model = load_causal_lm(out / "mqar-gdn-attn" / "final").eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        report = model_causality(model, ids)
    print(f"causal: {report.causal}  first leaking position: {report.first_leak}  max leak: {report.max_leak:.1e}")
    (out / "causality.json").write_text(json.dumps(report.to_json(), indent=2))
    return report.causal


def run_demo(out: Path, steps: int = 300) -> int:
    """The four steps into a new folder beside ``out`` (``fresh_dir``); 0 when every check passed, else 1."""
    out = fresh_dir(out)
    ok = _derive_and_verify(out)
    _train(out, steps)
    ok = _probe(out) and ok
    _section("done")
    print(f"outputs in {out}  (verify.json, causality.json, the run folder with its log and curves)")
    return 0 if ok else 1
