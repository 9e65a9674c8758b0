"""The keywords HF callers pass to a model's forward besides the ones it names, across transformers
releases: the cache keyword and output field, packed-document keywords, cache_position and
output_attentions (used by models/modeling.py)."""
from __future__ import annotations

from typing import Any

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from .cache import AssocMemCache
from .packed import PACKING_KWARGS

# transformers >= 5.24 passes the cache to ``forward`` as ``cache`` and reads it back from the
# output field ``cache``; earlier releases use ``past_key_values`` for both. The name is read off the
# installed release once, here, and every forward accepts either keyword (``take_cache``).
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def take_cache(cache: AssocMemCache | None, past_key_values: AssocMemCache | None) -> AssocMemCache | None:
    """The cache a caller passed, under the new keyword (``cache``) or the old one (``past_key_values``)."""
    if cache is not None and past_key_values is not None:
        raise ValueError("give the cache once: as cache= (transformers >= 5.24) or as past_key_values=, not both")
    return cache if cache is not None else past_key_values


# Keywords HF callers pass to a model's forward besides the ones it names, and what happens to each.
# Packed documents (models/packed.PACKING_KWARGS): each document runs from an empty state, blind to
# the others, and the loss skips the predictions across a boundary. Otherwise positions are the
# tokens' order (each row's real tokens from 0 under left padding, continued by the cache), and
# position_ids are not read.
HF_KWARGS = {
    **{name: f"packed documents: {meaning}" for name, meaning in PACKING_KWARGS.items()},
    "cache_position": "checked: must be past, ..., past + T - 1 (the tokens the cache has seen, then these)",
    "output_attentions": "refused when True: the recurrent mixers have no attention matrix (use "
                         "output_hidden_states or the probes)",
}


def check_hf_kwargs(kwargs: dict[str, Any], *, past: int, T: int) -> None:
    """Refuse keywords outside HF_KWARGS by name, a cache_position that is not the next T tokens,
    and output_attentions=True."""
    unknown = sorted(set(kwargs) - set(HF_KWARGS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}; besides the named ones, forward accepts "
                        f"{sorted(HF_KWARGS)}")
    if kwargs.get("output_attentions"):
        raise ValueError(f"output_attentions=True: {HF_KWARGS['output_attentions']}")
    position = kwargs.get("cache_position")
    if position is not None and not torch.equal(position.flatten().cpu(), torch.arange(past, past + T)):
        raise ValueError(f"cache_position {position.flatten().tolist()} is not the next {T} positions after the "
                         f"{past} the cache has seen ({past}..{past + T - 1})")


def output_cache(output) -> AssocMemCache | None:
    """The cache held by a model output, whichever transformers release made it."""
    return getattr(output, CACHE_FIELD)
