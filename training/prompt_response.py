"""Prompt/response rows: the loss on the response only.

One row per (prompt, response) pair, right-padded to a fixed width:

    input_ids = prompt ‖ response ‖ pad …            [width]
    labels    = −100 … ‖ response ‖ −100 …           [width]   (HF-aligned: the model shifts them)

so the logits at the last prompt token are scored against the first response token, and nothing
is learned from the prompt or the padding. Right padding needs no attention mask in a causal model:
no real token attends to a later pad. Used by the verifiable tasks (verifiable/) and by local files
with ``prompt_field`` / ``response_field`` (data.py).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

IGNORE_INDEX = -100


def prompt_response_arrays(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, width: int,
                           pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """input_ids and labels as int64 arrays [N, width] (see the module docstring).

    Raises ValueError naming the first pair that does not fit in ``width`` or has an empty prompt or response.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses; give one response per prompt")
    inputs = np.full((len(prompts), width), pad_id, dtype=np.int64)
    labels = np.full((len(prompts), width), IGNORE_INDEX, dtype=np.int64)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        p, r = len(prompt), len(response)
        if p == 0 or r == 0:
            raise ValueError(f"pair {row} has an empty {'prompt' if p == 0 else 'response'}: a response token is "
                             f"learned from the position before it, so both need at least one token")
        if p + r > width:
            raise ValueError(f"pair {row} has {p} prompt + {r} response tokens = {p + r} > the row width {width}")
        inputs[row, :p] = prompt
        inputs[row, p:p + r] = response
        labels[row, p:p + r] = response
    return inputs, labels
