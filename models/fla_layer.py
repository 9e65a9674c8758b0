"""Any mixer module called the way FLA's layers are called.

    layer = FLAStyleLayer.from_spec(get_preset("gated_deltanet"), d_model=256, layer_idx=3)
    o, _, cache = layer(hidden_states, attention_mask=mask, past_key_values=cache, use_cache=True)
    o, _, _ = layer(packed [1, total, D], cu_seqlens=cu_seqlens)          # variable-length documents

FLA's layers (``fla.layers``) take (hidden_states [B, T, D], attention_mask [B, T] with 0 at
padding, past_key_values, use_cache, cu_seqlens) and return (o, attentions = None,
past_key_values). Here:

- attention_mask (left or right padding) is honoured by every mixer: attention masks the padded
  keys, recurrent and SCA layers run each row's real tokens only (models/blocks.run_mixer).
- past_key_values: an AssocMemCache (FLA's cache is indexed by layer_idx too); this layer reads
  and writes slot ``layer_idx``. use_cache without one starts a cache of layer_idx + 1 slots.
- cu_seqlens [N + 1] with hidden_states [1, total, D]: N documents, each from an empty state
  (or from row i of the cache's state) and blind to the others (models/packed.run_packed); the
  cache then holds one state row per document, as FLA's varlen kernels return.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from assocmem.mixers.layer import MixerModule, build_mixer
from assocmem.mixers.spec import MixerSpec

from .blocks import run_mixer
from .cache import AssocMemCache
from .packed import run_packed


class FLAStyleLayer(nn.Module):
    """A MixerModule behind FLA's layer signature (see the module docstring)."""

    def __init__(self, mixer: MixerModule, layer_idx: int = 0):
        super().__init__()
        if layer_idx < 0:
            raise ValueError(f"layer_idx must be >= 0, got {layer_idx}")
        self.mixer = mixer
        self.layer_idx = layer_idx

    @classmethod
    def from_spec(cls, spec: MixerSpec, d_model: int, *, layer_idx: int = 0, form: str = "auto") -> FLAStyleLayer:
        return cls(build_mixer(spec, d_model, form=form, layer_idx=layer_idx), layer_idx)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                past_key_values: AssocMemCache | None = None, use_cache: bool = False,
                output_attentions: bool = False, cu_seqlens: torch.LongTensor | None = None):
        """hidden_states [B, T, D] (or [1, total, D] with cu_seqlens) -> (o, None, past_key_values)."""
        if output_attentions:
            raise ValueError("output_attentions=True: assocmem mixers return no attention matrix (FLA's linear "
                             "layers return None as well)")
        if past_key_values is not None and not isinstance(past_key_values, AssocMemCache):
            raise TypeError(f"past_key_values must be an AssocMemCache (slot layer_idx={self.layer_idx} is this "
                            f"layer's), got {type(past_key_values).__name__}")
        if use_cache and past_key_values is None:
            past_key_values = AssocMemCache(self.layer_idx + 1)
        if past_key_values is not None and len(past_key_values.layers) <= self.layer_idx:
            raise ValueError(f"the cache has {len(past_key_values.layers)} slots; this layer uses slot "
                             f"{self.layer_idx}")
        state = None if past_key_values is None else past_key_values[self.layer_idx]
        keep = past_key_values is not None
        if cu_seqlens is not None:
            if attention_mask is not None:
                raise ValueError("give cu_seqlens (packed documents) or attention_mask (padding), not both")
            o, state = run_packed(lambda x, s: self.mixer(x, state=s, return_state=True), hidden_states,
                                  cu_seqlens, state=state, return_state=keep)
        else:
            mask = None if attention_mask is None else attention_mask.bool()
            o, state = run_mixer(self.mixer, hidden_states, state=state, mask=mask, return_state=keep)
        if keep:
            past_key_values[self.layer_idx] = state
        return o, None, past_key_values
