"""AssocMemCache: one transformers ``Cache`` holding every layer's decode state.

    attention layer   AttentionState(keys [B, Hkv, N, K], values [B, Hkv, N, V], valid [B, N], pos [B])
                      (+ GCLA running sums, short-conv buffer [B, w − 1, C], or None)
    recurrent layer   MixerState(memory [B, H, K, V] (or a tuple), conv [B, w − 1, C])
    SCA layer         SCAState(den [B, K], num [B, K, H, M, 2], pos [B], conv_buffer [B, w − 1, C])

Recurrent states have a fixed size, so a decode step costs O(1) in the prefix
length there. The cache is bound to the model that first fills it (its
``signature``: the layer specs and width); passing it to another model raises.
Recurrent states cannot be rewound, so ``crop`` only accepts 0.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from .blocks import map_state, state_tensors


class LayerState:
    """The state slot of one layer, with the per-layer methods ``Cache`` dispatches to."""

    is_compileable = False
    is_croppable = False
    is_sliding = False
    supports_early_init = False
    is_initialized = True

    def __init__(self):
        self.state = None

    def __repr__(self) -> str:
        return f"LayerState({type(self.state).__name__ if self.state is not None else 'empty'})"

    def reset(self) -> None:
        self.state = None

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.state = map_state(lambda t: t.index_select(0, beam_idx.to(t.device)), self.state)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.state = map_state(lambda t: t.repeat_interleave(repeats, dim=0), self.state)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.state = map_state(lambda t: t[indices], self.state)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove != 0:
            raise ValueError("AssocMemCache cannot be cropped: recurrent states cannot be rewound")

    def get_max_length(self) -> int:
        return -1

    def offload(self) -> None:
        return None

    def prefetch(self) -> None:
        return None


class AssocMemCache(Cache):
    """Per-layer decode states of an AssocMem model (see the module docstring)."""

    def __init__(self, num_layers: int, signature: str | None = None):
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        super().__init__(layers=[LayerState() for _ in range(num_layers)])
        self.signature = signature
        self.seen_tokens = 0

    def __getitem__(self, layer_idx: int):
        return self.layers[layer_idx].state

    def __setitem__(self, layer_idx: int, state) -> None:
        self.layers[layer_idx].state = state

    def bind(self, signature: str, num_layers: int) -> None:
        """Check (or set, for a fresh cache) which model this cache belongs to."""
        if len(self.layers) != num_layers or (self.signature is not None and self.signature != signature):
            raise ValueError(
                "past_key_values is an AssocMemCache from a different model "
                f"({len(self.layers)} layers, signature {self.signature!r}); this model has {num_layers} layers, "
                f"signature {signature!r}. Pass past_key_values=None to start a new cache.")
        self.signature = signature

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens (columns, padding included) consumed so far."""
        return self.seen_tokens

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.seen_tokens + query_length, 0

    def reset(self) -> None:
        super().reset()
        self.seen_tokens = 0

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    def state_bytes(self) -> int:
        """Bytes of every state tensor held, summed over layers (divide by the batch for per-sequence)."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in state_tensors(layer.state))

    def __repr__(self) -> str:
        return f"AssocMemCache(seen_tokens={self.seen_tokens}, layers={self.layers})"
