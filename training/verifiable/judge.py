"""A language model as a verifier: the probability it gives "Yes" after a judge prompt.

    score = p(yes) / (p(yes) + p(no))      ("yes_vs_no", default: the two answers' odds, sigmoid(l_yes − l_no))
    score = p(yes)                         ("p_yes": the softmax probability of the yes token)

where p is the model's next-token distribution (temperature 1) after the prompt. The same reading
serves an external judge (a second local HF model folder, ``ModelJudge`` in verifiers.py, loaded with
models/hf_load.py: never custom code) and self-verification (the policy judging its own response,
probes/sequential_tts.py). Prompts are token ids; rows are left-padded into batches with an
attention mask (and the unpadded positions for models whose forward takes ``position_ids``).
"""
from __future__ import annotations

import inspect
from typing import Sequence

import numpy as np
import torch

SCORES = ("yes_vs_no", "p_yes")


def single_token(tokenizer, text: str, what: str) -> int:
    """The one id ``text`` encodes to (ValueError naming ``what`` when it is several or none)."""
    ids = tokenizer.encode(text, add_special_tokens=False) if hasattr(tokenizer, "get_vocab") else tokenizer.encode(text)
    if len(ids) != 1:
        raise ValueError(f"{what} {text!r} encodes to {len(ids)} tokens {ids} with this tokenizer; the judge reads "
                         f"one next token: choose a text that is a single token (e.g. ' Yes' or 'Yes')")
    return int(ids[0])


@torch.no_grad()
def yes_scores(model, prompts: Sequence[Sequence[int]], *, yes_id: int, no_id: int, pad_id: int,
               score: str = "yes_vs_no", batch_size: int = 16) -> np.ndarray:
    """float64 [N] scores in [0, 1] of the next token after each prompt (module docstring)."""
    if score not in SCORES:
        raise ValueError(f"unknown judge score {score!r}; choose one of {list(SCORES)}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("the judge needs at least one prompt, each with at least one token")
    device = next(model.parameters()).device
    takes_positions = "position_ids" in inspect.signature(model.forward).parameters
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(prompts), batch_size):
            rows = [list(p) for p in prompts[start:start + batch_size]]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], device=device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
            extra = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)} if takes_positions else {}
            logits = model(input_ids=ids, attention_mask=mask, **extra).logits[:, -1].double()   # [B, V]
            if score == "p_yes":
                out.append(torch.softmax(logits, -1)[:, yes_id])
            else:
                out.append(torch.sigmoid(logits[:, yes_id] - logits[:, no_id]))
    finally:
        model.train(was_training)
    return torch.cat(out).cpu().numpy()
