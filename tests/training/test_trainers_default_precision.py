"""TRL's GRPOTrainer and SFTTrainer and transformers' Trainer train an assocmem model at their own
default settings on CPU: TRL's configs default to bf16 mixed precision and gradient checkpointing,
GRPO pads its prompts on the left, SFT's ``packing=True`` packs documents without padding, and
Trainer here runs bf16 with checkpointing on left-padded rows. Each trainer runs two steps and the
forward really ran under bf16 autocast. ``cuda_policy`` runs the
same steps under CUDA autocast's casts reproduced on CPU (tests/cuda_autocast.py): float32 norms and
reductions meeting bf16 linears, the mix that only a GPU shows otherwise.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from cuda_autocast import CUDAAutocastPolicy  # tests/cuda_autocast.py

from assocmem.models import HybridConfig, build_model

pytest.importorskip("accelerate", reason="HF Trainer needs accelerate: pip install -e '.[hf]'")

WORDS = [str(d) for d in range(10)] + ["SEP", "ANS", "EOS", "PAD"]
PROMPTS = ["1 2 SEP", "3 SEP", "4 5 6 7 SEP", "8 SEP 9", "1", "2 3 4 5 6 7 8 9 SEP", "0 0", "5 5 5"]
POLICIES = ["cpu_autocast", "cuda_policy"]


def tokenizer():
    """Word-level tokenizer over WORDS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="PAD"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="PAD", eos_token="EOS", pad_token="PAD")


def tiny(layers: str):
    torch.manual_seed(0)
    extra = {"overrides": {"sca": {"num_heads": 2}}} if "sca" in layers else {}
    return build_model(HybridConfig(layers=layers, d_model=32, vocab_size=len(WORDS), num_heads=2, mlp_ratio=2.0,
                                    **extra))


def common(tmp_path) -> dict:
    return dict(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, report_to=[], use_cpu=True,
                logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True)


def checkpointing_under(policy: str) -> dict:
    """gradient_checkpointing_kwargs: under the CUDA policy the recomputation in backward enters the
    policy again (``context_fn``), as torch.utils.checkpoint restores CUDA autocast on a GPU; it
    restores CPU autocast itself."""
    if policy == "cpu_autocast":
        return {}
    return {"gradient_checkpointing_kwargs": {"use_reentrant": False,
                                              "context_fn": lambda: (contextlib.nullcontext(), CUDAAutocastPolicy())}}


def train(trainer, model, policy: str) -> list[dict]:
    """trainer.train() under ``policy``; the logged steps. Checks that autocast ran the forward in bf16
    (the blocks' linear maps; TRL's SFT computes the head's log-probabilities from its weight
    directly), that the policy cast something, and that the weights moved and stayed finite."""
    dtypes = set()
    first_linear = next(m for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    hook = first_linear.register_forward_hook(lambda m, i, o: dtypes.add(o.dtype))
    before = [p.detach().clone() for p in model.parameters()]
    mode = CUDAAutocastPolicy() if policy == "cuda_policy" else contextlib.nullcontext()
    with mode:
        trainer.train()
    hook.remove()
    assert dtypes == {torch.bfloat16}, dtypes
    if policy == "cuda_policy":
        assert mode.calls["lower"] and mode.calls["float32"], "the policy cast nothing"
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in logged), logged
    return logged


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("layers", ["gated_deltanet,attn", "sca,mamba2,attn"])
def test_grpo_trainer_at_its_defaults(tmp_path, layers, policy):
    """Prompts of 1 to 9 tokens, left-padded by TRL; completions padded after EOS; a tiny reward."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model = tiny(layers)
    args = GRPOConfig(**common(tmp_path), num_generations=4, max_completion_length=6, learning_rate=1e-3,
                      **checkpointing_under(policy))
    assert args.bf16 and args.gradient_checkpointing  # TRL's defaults, not set here

    def length(prompts, completions, **kwargs):
        return [float(len(c.split())) for c in completions]

    trainer = GRPOTrainer(model=model, reward_funcs=[length], args=args, processing_class=tokenizer(),
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    logged = train(trainer, model, policy)
    assert all(0.0 <= h["reward"] <= 6.0 for h in logged)
    assert model.model.gradient_checkpointing


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("policy", POLICIES)
def test_sft_trainer_packing_at_its_defaults(tmp_path, policy):
    """packing=True (best-fit decreasing, padding-free): several documents per row, marked by
    position_ids, cu_seq_lens_q/k and seq_idx, which the model reads as document boundaries."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model = tiny("gated_deltanet,attn")
    args = SFTConfig(**common(tmp_path), packing=True, max_length=16, learning_rate=1e-3, **checkpointing_under(policy))
    assert args.bf16 and args.gradient_checkpointing
    trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer(),
                         train_dataset=Dataset.from_dict({"text": PROMPTS * 2}))
    seen = []
    model.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("cu_seq_lens_q")), with_kwargs=True)
    train(trainer, model, policy)
    assert seen and all(cu is not None and len(cu) > 2 for cu in seen)  # rows of several documents


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("policy", POLICIES)
def test_trainer_bf16_checkpointing_left_padding(tmp_path, policy):
    """Rows of 3 to 12 tokens left-padded into one batch (tokenizer padding_side="left"): the first
    logged loss equals the model's own summed loss on that batch under the same autocast, over the
    count of label tokens Trainer passes (tests/training/test_hf_trainer.py)."""
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    model = tiny("gated_deltanet,sca,attn")
    tok = tokenizer()
    tok.padding_side = "left"
    texts = [" ".join(WORDS[(3 * i + j) % 12] for j in range(3 + 3 * i)) for i in range(4)]
    data = Dataset.from_dict({"input_ids": [tok(t)["input_ids"] for t in texts]})
    collator = DataCollatorForLanguageModeling(tok, mlm=False)
    batch = collator([{"input_ids": ids} for ids in data["input_ids"]])
    assert bool((batch["attention_mask"][:, 0] == 0).any())  # left padding
    mode = CUDAAutocastPolicy() if policy == "cuda_policy" else contextlib.nullcontext()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), mode:
        total = float(model(**batch, num_items_in_batch=1).loss)
    counts = []
    model.register_forward_pre_hook(lambda m, a, kw: counts.append(kw.get("num_items_in_batch")), with_kwargs=True)
    args = TrainingArguments(**common(tmp_path), bf16=True, gradient_checkpointing=True, learning_rate=1e-3,
                             **checkpointing_under(policy))
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    logged = train(trainer, model, policy)
    # the sampler may order the rows differently: each row's tokens are computed alike (measured: equal)
    assert logged[0]["loss"] == pytest.approx(total / float(counts[0]), rel=1e-6)
