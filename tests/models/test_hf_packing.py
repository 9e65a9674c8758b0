"""transformers' packing without padding (DataCollatorWithFlattening, what HF Trainer and TRL's
padding_free use) on assocmem models: documents laid end to end in one row, marked by position_ids
restarting at 0 (and, when asked, the flash-attention keywords and seq_idx). Every document's logits
equal the document run alone, for every tiny preset and every mixer next to attention; through
Trainer too, whose first logged loss is the mean over the documents' own predictions."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from transformers import DataCollatorWithFlattening

from assocmem.mixers.lower import lower
from assocmem.mixers.presets import get_preset, list_presets
from assocmem.models import HybridConfig, build_model
from assocmem.models.presets import list_model_presets

LENGTHS = [5, 9, 5, 3]  # two of equal length: the packed path batches those
LENGTH = {"st1-tiny": 128}  # circular FOH is tied to its sequence length: documents of that length only
FLOAT64 = dict(atol=1e-14, rtol=0)  # float64 rounding (measured <= 4.5e-16)
PRESETS = [p for p in list_model_presets() if "-tiny" in p]
# every mixer preset next to attention; the scan class compiles its derived step (slow on CPU)
HYBRIDS = [pytest.param(f"{p},attn", id=f"{p},attn", marks=pytest.mark.slow if lower(get_preset(p)).name == "scan"
                        else ()) for p in list_presets()]
COLLATORS = {"position_ids": {}, "flash_kwargs": {"return_flash_attn_kwargs": True, "return_seq_idx": True}}


def model_named(name: str, dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(0)
    if "," not in name:
        return build_model(name, dtype=dtype).eval()
    extra = {"overrides": {"sca": {"num_heads": 2}}} if "sca" in name else {}
    hc = HybridConfig(layers=name, d_model=32, vocab_size=64, num_heads=2, mlp_ratio=2.0, **extra)
    return build_model(hc, dtype=dtype).eval()


def documents(vocab: int, lengths=LENGTHS, seed=1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


def per_document(model, docs) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each document's logits [1, n, V] run alone, and the mean next-token loss over all documents."""
    logits, total, count = [], 0.0, 0
    with torch.no_grad():
        for doc in docs:
            alone = model(torch.tensor([doc])).logits
            logits.append(alone)
            total = total + F.cross_entropy(alone[0, :-1].double(), torch.tensor(doc[1:]), reduction="sum")
            count += len(doc) - 1
    return logits, total / count


def assert_documents_alone(packed_logits: torch.Tensor, alone: list[torch.Tensor], **tol) -> None:
    start = 0
    for want in alone:
        assert_close(packed_logits[:, start:start + want.shape[1]], want, **tol)
        start += want.shape[1]
    assert start == packed_logits.shape[1]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("collator", COLLATORS)
@pytest.mark.parametrize("name", PRESETS + HYBRIDS)
def test_flattened_documents_equal_each_run_alone(name, collator):
    model = model_named(name)
    n = LENGTH.get(name)
    docs = documents(model.config.vocab_size, [n, n] if n else LENGTHS)
    batch = DataCollatorWithFlattening(**COLLATORS[collator])([{"input_ids": d} for d in docs])
    alone, loss = per_document(model, docs)
    with torch.no_grad():
        out = model(**batch)
    assert_documents_alone(out.logits, alone, **FLOAT64)
    assert_close(out.loss, loss, atol=1e-13, rtol=0)  # the collator's -100 at each document's first token


def test_trainer_with_the_flattening_collator(tmp_path):
    """Trainer.predict gives each document's logits as if run alone; training steps on the packed
    batches log the loss of the documents' own predictions (the model's loss, not a leaked one)."""
    pytest.importorskip("accelerate", reason="HF Trainer needs accelerate: pip install -e '.[hf]'")
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    model = model_named("gated_deltanet,sca,attn")
    docs = documents(64)
    data = Dataset.from_dict({"input_ids": docs})  # one batch: each step sees every document, in some order
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             max_steps=2, report_to=[], logging_steps=1, use_cpu=True, save_strategy="no",
                             disable_tqdm=True, learning_rate=1e-3)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=DataCollatorWithFlattening())
    predicted = trainer.predict(data)
    alone, loss = per_document(model, docs)
    assert_documents_alone(torch.as_tensor(predicted.predictions), alone, **FLOAT64)
    assert predicted.metrics["test_loss"] == pytest.approx(float(loss), rel=1e-12)
    trainer.train()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    assert logged[0] == pytest.approx(float(loss), rel=1e-7)  # Trainer sums the logged loss in float32


def test_rows_of_packed_documents_and_transformers_rule():
    """position_ids [B, T] with resets in several rows: the rows are read as documents laid end to end;
    with an attention_mask or a cache they are not read (transformers' rule), and rows holding one
    document each run as a plain batch."""
    model = model_named("gated_deltanet,sca,attn")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    positions = torch.tensor([list(range(7)) + list(range(5)), list(range(3)) + list(range(9))])
    with torch.no_grad():
        out = model(ids, position_ids=positions, labels=ids)
        alone, loss = per_document(model, [ids[0, :7].tolist(), ids[0, 7:].tolist(), ids[1, :3].tolist(),
                                           ids[1, 3:].tolist()])
        assert_documents_alone(out.logits.reshape(1, 24, -1), alone, **FLOAT64)
        assert_close(out.loss, loss, atol=1e-13, rtol=0)
        joined = model(ids).logits
        assert torch.equal(model(ids, position_ids=positions, attention_mask=torch.ones(2, 12)).logits, joined)
        assert torch.equal(model(ids, position_ids=positions, past_key_values=model.new_cache()).logits, joined)
        plain = torch.arange(12).expand(2, 12)
        assert torch.equal(model(ids, position_ids=plain).logits, joined)


def test_packing_keywords_that_disagree_are_refused():
    model = model_named("gated_deltanet,attn")
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(3))
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4, 5]])
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with torch.no_grad():
        want = model(ids, cu_seqlens=cu).logits
        got = model(ids, position_ids=positions, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=6, max_length_k=6,
                    seq_idx=torch.tensor([[0] * 4 + [1] * 6]))
        assert torch.equal(got.logits, want)
        with pytest.raises(ValueError, match=r"disagree: .* gives boundaries \[0, 4, 10\], position_ids gives "
                                             r"\[0, 5, 10\]"):
            model(ids, cu_seqlens=cu, position_ids=torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4]]))
        with pytest.raises(ValueError, match="max_length_q=5 but the longest document .* has 6 tokens"):
            model(ids, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=5, max_length_k=5)
        with pytest.raises(ValueError, match=r"mark documents in one packed row \[1, total\], got a batch of 2"):
            model(ids.view(2, 5), cu_seqlens=cu)
        with pytest.raises(ValueError, match=r"came without document boundaries"):
            model(ids, max_length_q=6)
        with pytest.raises(ValueError, match=r"cannot be combined with \['a cache'\]"):
            model(ids, position_ids=positions, use_cache=True)
