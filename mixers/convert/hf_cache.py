"""The caches of transformers' published layers, opened, passed and read one way on every release
in the declared range (transformers >= 5.4).

Three things differ between releases:

    the keyword a layer takes its cache under   ``cache`` (>= 5.24); before: ``cache_params`` (linear
                                                layers), ``past_key_values`` (attention)
    the cache of a linear-attention layer        one ``DynamicCache(config=...)`` whose layers hold
                                                ``conv_states`` / ``recurrent_states`` by state index
                                                (5.17 and later); at 5.4 each family's own class:
                                                ``Qwen3NextDynamicCache`` (lists by layer),
                                                ``Mamba2Cache`` (conv_states, ssm_states [L, ...]),
                                                ``MambaCache`` (lists by layer)
    reading a state back                         ``Cache.get_conv_state`` / ``get_recurrent_state``
                                                exist only from 5.24, so they are not used

Each is decided by what the installed code has (a parameter of ``forward``, a class of the modeling
module, an attribute of the cache), never by a version number.
"""
from __future__ import annotations

import inspect
import types

import torch
import torch.nn as nn

# the keywords a layer's forward has taken its cache under, newest first
CACHE_KEYWORDS = ("cache", "cache_params", "past_key_values")
# the family caches of the releases before DynamicCache held linear-attention layers: class -> its
# constructor's arguments besides the config
FAMILY_CACHES = {"Qwen3NextDynamicCache": (), "Mamba2Cache": ("batch_size", "dtype", "device"),
                 "MambaCache": ("max_batch_size", "dtype", "device")}


def cache_keyword(layer: nn.Module) -> str:
    """The keyword ``layer.forward`` takes its cache under on the installed release."""
    names = inspect.signature(layer.forward).parameters
    for name in CACHE_KEYWORDS:
        if name in names:
            return name
    raise TypeError(f"{type(layer).__name__}.forward takes none of the cache keywords {list(CACHE_KEYWORDS)}; "
                    f"its parameters: {list(names)}")


def call_with_cache(layer: nn.Module, *args, cache, **kwargs):
    """``layer(*args, <its cache keyword>=cache, **kwargs)``."""
    return layer(*args, **{cache_keyword(layer): cache}, **kwargs)


def new_cache(config, modeling: types.ModuleType, x: torch.Tensor):
    """An empty cache for a layer of ``modeling`` built from ``config``, for a batch like x [B, T, d]:
    the family's own cache class where the release has one (FAMILY_CACHES), else
    ``DynamicCache(config=config)``."""
    for name, extra in FAMILY_CACHES.items():
        family = getattr(modeling, name, None)
        if family is not None:
            given = {"batch_size": x.shape[0], "max_batch_size": x.shape[0], "dtype": x.dtype, "device": x.device}
            return family(config, **{k: given[k] for k in extra})
    from transformers import DynamicCache

    return DynamicCache(config=config)


def linear_states(cache, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(conv state [B, C, K], recurrent state) that a linear-attention layer ``layer_idx`` left in
    ``cache``, whichever release's cache it is (module docstring)."""
    layer = cache.layers[layer_idx] if hasattr(cache, "layers") else None
    if layer is not None and hasattr(layer, "conv_states"):            # DynamicCache of linear layers (>= 5.17)
        conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
    else:                                                              # a family cache (earlier releases)
        recurrent_name = "recurrent_states" if hasattr(cache, "recurrent_states") else "ssm_states"
        conv, recurrent = cache.conv_states[layer_idx], getattr(cache, recurrent_name)[layer_idx]
    if conv is None or recurrent is None:
        raise ValueError(f"the {type(cache).__name__} holds no state of layer {layer_idx}: the layer did not write it "
                         f"(was the cache passed under the keyword its forward takes? {list(CACHE_KEYWORDS)})")
    return conv, recurrent


def attention_states(cache, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, values) [B, H_kv, T, d] an attention layer ``layer_idx`` left in a DynamicCache."""
    layer = cache.layers[layer_idx]
    if getattr(layer, "keys", None) is None or not layer.keys.numel():
        raise ValueError(f"the {type(cache).__name__} holds no keys of layer {layer_idx}: the layer did not write them "
                         f"(was the cache passed under the keyword its forward takes? {list(CACHE_KEYWORDS)})")
    return layer.keys, layer.values
