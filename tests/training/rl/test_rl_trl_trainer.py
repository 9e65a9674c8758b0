"""TRL's GRPOTrainer runs an assocmem model (an HF PreTrainedModel + GenerationMixin) on chain_sum."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")


def _tokenizer():
    """Word-level tokenizer over chain_sum's ids: '0'..'9', SEP, ANS, EOS, PAD (verifiable/chain_sum.py)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [str(d) for d in range(10)] + ["SEP", "ANS", "EOS", "PAD"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="PAD"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="PAD", eos_token="EOS", pad_token="PAD")
    tok.padding_side = "left"
    return tok


def test_grpo_trainer_runs_an_assocmem_model(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from assocmem.models import AssocMemConfig, AssocMemForCausalLM, HybridConfig
    from assocmem.training.verifiable import ChainSum, score_response

    task = ChainSum(num_digits=3)
    problems = task.problems(8, seed=0)
    tok = _tokenizer()
    prompts = [" ".join(task.decode(p.prompt).split()) for p in problems]
    answers = {prompt: p for prompt, p in zip(prompts, problems)}

    def correct(prompts, completions, **kwargs):
        return [float(score_response(task, answers[p], tok(c)["input_ids"])[1]) for p, c in zip(prompts, completions)]

    torch.manual_seed(0)
    hc = HybridConfig(d_model=32, layers="gdn,attn", num_heads=2, mlp_ratio=0, vocab_size=14)
    model = AssocMemForCausalLM(AssocMemConfig(hybrid=hc.model_dump(mode="json")))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=task.max_new_tokens, learning_rate=1e-2, loss_type="dapo", beta=0.0,
                      report_to=[], use_cpu=True, logging_steps=1, save_strategy="no", seed=0, bf16=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[correct, lambda prompts, completions, **k: [
        float("ANS" in c) for c in completions]], args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok)
    trainer.train()
    history = [h for h in trainer.state.log_history if "reward" in h]
    assert len(history) == 2 and all(0.0 <= h["reward"] <= 2.0 for h in history)
    moved = sum(float((v - before[k]).abs().max()) for k, v in model.state_dict().items())
    assert moved > 0  # two optimizer steps changed the weights
