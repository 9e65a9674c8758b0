"""Sampling completions from any HF causal LM, in batches through ``generate()`` with the cache.

    settings = SamplingSettings(num_samples=32, temperature=1.0, max_new_tokens=12, batch_size=64, seed=0)
    out = sample_completions(model, prompts, settings, eos_token_id=12, pad_token_id=13, logprobs=True)
    out.responses[i][j]     # sample j of prompt i: the new tokens, cut after the first EOS (kept)
    out.logprob_sum[i, j]   # log p(response | prompt) under the model at temperature 1

Steps of ``sample_completions``:
  1. every (prompt, sample) pair is one row; rows are sorted by prompt length (stable) and cut into
     batches of ``batch_size``;
  2. a batch is left-padded with ``pad_token_id`` and an attention mask, then ``generate()`` samples
     ``max_new_tokens`` with the model's cache (assocmem's AssocMemCache or transformers' caches);
  3. each row is cut after its first EOS (rows that never emit it are ``finished = False``);
  4. with ``logprobs``, one teacher-forced forward over prompt + response gives every response
     token's log-probability under the model itself (temperature 1, no top-p): the score for
     best-of-N by mean token log-probability.

The sampling distribution is exactly the settings': during the call the model's own
``generation_config`` (repetition penalties, suppressed tokens, a default top-k, an EOS id of the
config) is replaced by an empty one. Draws come from torch's global generator seeded with
``seed`` inside ``torch.random.fork_rng`` (the caller's RNG state is left as it was); they
depend on ``batch_size`` (which rows share a batch), not on anything else.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field


class SamplingSettings(BaseModel):
    """How completions are drawn."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # every float finite

    num_samples: int = Field(1, ge=1, description="completions per prompt (n)")
    temperature: float = Field(1.0, ge=0, description="softmax temperature; 0 = greedy (argmax) decoding")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass (1 = off)")
    top_k: int = Field(0, ge=0, description="keep the k most likely tokens (0 = off)")
    max_new_tokens: int = Field(32, ge=1, description="longest response, EOS included")
    batch_size: int = Field(64, ge=1, description="rows (prompt, sample) per generate() call")
    seed: int = Field(0, description="seed of torch's generator for the whole call")


@dataclass
class Completions:
    """Sampled responses of P prompts × n samples."""

    responses: list[list[tuple[int, ...]]]   # [P][n] new tokens up to and including the first EOS
    finished: np.ndarray                     # [P, n] bool: the response ends with EOS (always True
                                             # when there is no EOS: a fixed-length response)
    logprob_sum: np.ndarray | None           # [P, n] float64: Σ log p(token) over the response
    num_tokens: np.ndarray                   # [P, n] int: response length

    @property
    def logprob_mean(self) -> np.ndarray:
        """[P, n] mean token log-probability (the length-normalised score)."""
        if self.logprob_sum is None:
            raise ValueError("these completions were sampled without logprobs=True")
        return self.logprob_sum / np.maximum(self.num_tokens, 1)


def _left_pad(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask [B, max length], prompts aligned to the right."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids, mask


def _generate(model, ids: torch.Tensor, mask: torch.Tensor, settings: SamplingSettings,
              eos_token_id: int | None, pad_token_id: int) -> torch.Tensor:
    """[B, T + new] from generate() with exactly the settings' distribution (see the module docstring)."""
    from transformers import GenerationConfig

    sampling = settings.temperature > 0
    options = {"do_sample": sampling, "max_new_tokens": settings.max_new_tokens, "eos_token_id": eos_token_id,
               "pad_token_id": pad_token_id, "use_cache": True}
    if sampling:
        options.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k)
    own = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        return model.generate(ids, attention_mask=mask, **options)
    finally:
        model.generation_config = own


def _cut(row: torch.Tensor, eos_token_id: int | None) -> tuple[tuple[int, ...], bool]:
    tokens = [int(t) for t in row]
    if eos_token_id is not None and eos_token_id in tokens:
        return tuple(tokens[: tokens.index(eos_token_id) + 1]), True
    return tuple(tokens), eos_token_id is None


def token_logprobs(model, sequences: torch.Tensor, mask: torch.Tensor, prompt_width: int,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """log p(token) [B, new] of every response position, teacher-forced (differentiable).

    sequences [B, W + new] (left-padded prompts of width W, then the responses), mask [B, W + new]
    (the prompt padding mask, 1 on every response position). The log-softmax runs in ``dtype``
    (default: the logits'). Models whose forward takes ``position_ids`` (transformers') get the
    positions of the unpadded rows, as in generate(); assocmem's models derive them from the mask.
    """
    extra = {}
    if "position_ids" in inspect.signature(model.forward).parameters:             # transformers' models: the
        extra["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)               # positions generate() used
    logits = model(input_ids=sequences, attention_mask=mask, **extra).logits    # [B, W + new, V]
    logits = logits[:, prompt_width - 1:-1]                                     # position t predicts t + 1
    logp = F.log_softmax(logits if dtype is None else logits.to(dtype), dim=-1)
    targets = sequences[:, prompt_width:]                                       # [B, new]
    return logp.gather(-1, targets[..., None])[..., 0]                          # [B, new]


@torch.no_grad()
def response_logprobs(model, sequences: torch.Tensor, mask: torch.Tensor, prompt_width: int,
                      lengths: Sequence[int]) -> np.ndarray:
    """Σ log p(token) over each row's response, teacher-forced (``token_logprobs`` in float64).

    lengths[b] response tokens of row b. Returns float64 [B].
    """
    token_logp = token_logprobs(model, sequences, mask, prompt_width, torch.float64)   # [B, new]
    targets = sequences[:, prompt_width:]
    keep = torch.arange(targets.shape[1])[None, :] < torch.as_tensor(list(lengths))[:, None]
    return (token_logp * keep).sum(-1).numpy()


def sample_completions(model, prompts: Sequence[Sequence[int]], settings: SamplingSettings, *,
                       eos_token_id: int | None, pad_token_id: int, logprobs: bool = False,
                       report: Callable[[str], None] | None = None) -> Completions:
    """``settings.num_samples`` completions of every prompt (see the module docstring); ``report``
    (e.g. training/progress.progress_line) hears "sampling batch b/B (rows r/R) ..." before each batch."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("give at least one prompt, each with at least one token")
    n = settings.num_samples
    rows = sorted(((i, j) for i in range(len(prompts)) for j in range(n)), key=lambda r: len(prompts[r[0]]))
    responses: list[list[tuple[int, ...]]] = [[() for _ in range(n)] for _ in prompts]
    finished = np.zeros((len(prompts), n), dtype=bool)
    sums = np.zeros((len(prompts), n), dtype=np.float64)
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(settings.seed)
            batches = -(-len(rows) // settings.batch_size)
            for start in range(0, len(rows), settings.batch_size):
                batch = rows[start:start + settings.batch_size]
                if report is not None:
                    report(f"sampling batch {start // settings.batch_size + 1}/{batches} "
                           f"(completions {start + len(batch)}/{len(rows)}) ...")
                ids, mask = _left_pad([prompts[i] for i, _ in batch], pad_token_id)
                out = _generate(model, ids.to(device), mask.to(device), settings, eos_token_id, pad_token_id).cpu()
                cut = [_cut(row, eos_token_id) for row in out[:, ids.shape[1]:]]
                for (i, j), (tokens, done) in zip(batch, cut):
                    responses[i][j], finished[i, j] = tokens, done
                if logprobs:
                    full_mask = torch.cat([mask, torch.ones_like(out[:, ids.shape[1]:])], dim=1)
                    scored = response_logprobs(model, out.to(device), full_mask.to(device), ids.shape[1],
                                               [len(t) for t, _ in cut])
                    for (i, j), value in zip(batch, scored):
                        sums[i, j] = value
    finally:
        model.train(was_training)
    lengths = np.array([[len(r) for r in row] for row in responses], dtype=np.int64)
    return Completions(responses=responses, finished=finished, logprob_sum=sums if logprobs else None,
                       num_tokens=lengths)


# ---------------------------------------------------------------- context limits
@dataclass(frozen=True)
class ContextLimit:
    """A length a model cannot or should not be run beyond."""

    tokens: int
    hard: bool      # True: refuse longer inputs; False: flag them
    reason: str


def context_limits(model) -> list[ContextLimit]:
    """The model's length limits: SCA layers' ``sca.maxlen`` (d(t) = max(maxlen − 1 − t, 0) stops
    moving beyond it; mixers/sca.py), refused; a transformers config's ``max_position_embeddings``
    (the RoPE / position range it was built for), flagged."""
    config = model.config
    limits = []
    if getattr(config, "model_type", None) == "assocmem":
        spectral = [s.layer.sca.maxlen for s in config.hybrid_config.mixer_specs()
                    if s.memory.kind == "spectral"]
        if spectral:
            limits.append(ContextLimit(min(spectral), True, f"SCA layers are defined up to sca.maxlen={min(spectral)} "
                                       f"tokens (d(t) = max(maxlen − 1 − t, 0))"))
    elif getattr(config, "max_position_embeddings", None):
        limits.append(ContextLimit(int(config.max_position_embeddings), False,
                                   f"beyond max_position_embeddings={config.max_position_embeddings} "
                                   f"(the position/RoPE range of the config)"))
    return limits


def check_context(model, length: int, what: str) -> list[str]:
    """Refuse ``length`` beyond a hard limit (ValueError with the reason); return the soft limits it
    exceeds as flags."""
    flags = []
    for limit in context_limits(model):
        if length > limit.tokens:
            if limit.hard:
                raise ValueError(f"{what} needs {length} tokens: {limit.reason}")
            flags.append(f"{what} ({length} tokens) is {limit.reason}")
    return flags
