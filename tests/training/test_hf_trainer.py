"""transformers' Trainer runs an assocmem model as any HF causal LM: bf16 autocast and gradient
checkpointing on, the logged loss and gradient norm of its first step equal the model's own.

Trainer divides the summed token loss by its own count of the batch's label tokens
(``num_items_in_batch``: every label at transformers 5.4, the shifted ones at 5.17 and later), so the
expected values are the model's loss and gradient given the count Trainer passed."""
from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("accelerate", reason="HF Trainer needs accelerate: pip install -e '.[hf]'")
from transformers import Trainer, TrainingArguments  # noqa: E402

from assocmem.models import HybridConfig, build_model  # noqa: E402


def test_trainer_bf16_with_gradient_checkpointing(tmp_path):
    torch.manual_seed(0)
    model = build_model(HybridConfig(layers="gdn,attn", d_model=32, vocab_size=50, num_heads=2), dtype=torch.float32)
    ids = torch.randint(0, 50, (4, 70), generator=torch.Generator().manual_seed(1))
    initial = copy.deepcopy(model)
    counts = []
    model.register_forward_pre_hook(lambda m, a, kw: counts.append(kw.get("num_items_in_batch")), with_kwargs=True)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=1, bf16=True,
                             gradient_checkpointing=True, report_to=[], logging_steps=1, use_cpu=True,
                             save_strategy="no", disable_tqdm=True)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model=model, args=args, train_dataset=[{"input_ids": r, "labels": r} for r in ids])
    trainer.train()
    logged = trainer.state.log_history[0]
    assert model.model.gradient_checkpointing
    assert int(counts[0]) in (4 * 70, 4 * 69)  # every label, or the shifted ones (the module docstring)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = initial(ids, labels=ids, num_items_in_batch=counts[0]).loss
    want.backward()
    want_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in initial.parameters()]))
    assert logged["loss"] == pytest.approx(float(want), rel=1e-6)
    # the backward recomputes each block (checkpointing) and Trainer accumulates differently: bf16-level
    # agreement of the norm (measured 2.1e-5 relative)
    assert logged["grad_norm"] == pytest.approx(float(want_norm), rel=1e-4)
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
