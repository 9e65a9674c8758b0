"""Model-level torch.compile: train.compile in assocmem train, and a compiled hybrid that trains and generates.

Slow: compiling a whole hybrid model takes minutes on a small CPU.
"""
import numpy as np
import pytest
import torch

from assocmem.training.config import load_config
from assocmem.training.loop import train
from assocmem.training.runlog import read_log

HYBRID = {"hf_config": None, "hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}}


def _losses(run_dir):
    return [r["loss"] for r in read_log(run_dir / "log.jsonl") if r["split"] == "train"]


@pytest.mark.slow
def test_train_compile_gives_the_eager_losses(write_config, tmp_path):
    """train.compile: true trains a GDN + attention hybrid with the same losses as eager (to rounding:
    inductor fuses float32 sums in another order) and saves the same checkpoint keys."""
    runs = {}
    for name, compile in (("eager", False), ("compiled", True)):
        cfg = load_config(write_config(name, {"model": HYBRID, "train": {"steps": 3, "compile": compile},
                                               "data": {"num_eval": 0}}))
        train(cfg)
        runs[name] = tmp_path / "runs" / name
    np.testing.assert_allclose(_losses(runs["compiled"]), _losses(runs["eager"]), rtol=1e-4)
    from safetensors.torch import load_file

    eager, compiled = (load_file(runs[n] / "final" / "model.safetensors") for n in ("eager", "compiled"))
    assert eager.keys() == compiled.keys()
    for key in eager:
        torch.testing.assert_close(compiled[key], eager[key], rtol=1e-3, atol=1e-5)


@pytest.mark.slow
def test_compiled_hybrid_trains_and_generates():
    """torch.compile of a hybrid's decoder: a training step and greedy generation equal the eager model's."""
    from assocmem.training.config import ModelConfig
    from assocmem.training.model_factory import build_from_config

    torch.manual_seed(0)
    eager = build_from_config(ModelConfig(**HYBRID), vocab_size=64)
    compiled = build_from_config(ModelConfig(**HYBRID), vocab_size=64)
    compiled.load_state_dict(eager.state_dict())
    compiled.get_decoder().compile()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(1))
    for model in (eager, compiled):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 1e-2 * p.grad
    torch.testing.assert_close(compiled(input_ids=ids).logits, eager(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
    prompt = ids[:, :8]
    out_e = eager.generate(prompt, max_new_tokens=6, do_sample=False)
    out_c = compiled.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(out_c, out_e)


@pytest.mark.slow
def test_bench_train_compile_times_both(tmp_path):
    import json

    from assocmem.cli import main

    out = tmp_path / "t.json"
    assert main(["bench", "train", "--mixers", "gdn", "--d-model", "16", "--vocab", "128", "--seq-len", "32",
                 "--num-kv-pairs", "4", "--batch", "2", "--warmup", "1", "--steps", "2", "--compile",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["mixer"] for r in rows] == ["gdn", "gdn (compiled)"]
    assert all(r["tokens_per_s"] > 0 for r in rows)
