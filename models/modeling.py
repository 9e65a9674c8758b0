"""The one HF modeling file for every hybrid: AssocMemConfig, AssocMemModel, AssocMemForCausalLM.

    config = AssocMemConfig(hybrid=HybridConfig(d_model=64, vocab_size=256, layers="gdn*3,attn", n_layers=4))
    model = AssocMemForCausalLM(config)                    # or AutoModelForCausalLM.from_config(config)
    model.generate(ids, max_new_tokens=20)                 # AssocMemCache holds every layer's state

The HybridConfig (JSON in ``config.hybrid``) is the single source of truth;
the HF fields vocab_size, hidden_size, num_hidden_layers and
tie_word_embeddings are derived from it.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from assocmem.mixers.norm import RMSNorm
from assocmem.mixers.wiola import WiolaRMSNorm

from .blocks import Block, build_norm
from .cache import AssocMemCache
from .config import HybridConfig


# transformers >= 5.24 passes the cache to ``forward`` as ``cache`` and reads it back from the
# output field ``cache``; earlier releases use ``past_key_values`` for both. The name is read off the
# installed release once, here, and every forward accepts either keyword (``take_cache``).
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def take_cache(cache: AssocMemCache | None, past_key_values: AssocMemCache | None) -> AssocMemCache | None:
    """The cache a caller passed, under the new keyword (``cache``) or the old one (``past_key_values``)."""
    if cache is not None and past_key_values is not None:
        raise ValueError("give the cache once: as cache= (transformers >= 5.24) or as past_key_values=, not both")
    return cache if cache is not None else past_key_values


_HYBRID_CACHE = "_hybrid_config_cache"


def _key(hybrid: dict) -> str:
    return json.dumps(hybrid, sort_keys=True)


def output_cache(output) -> AssocMemCache | None:
    """The cache held by a model output, whichever transformers release made it."""
    return getattr(output, CACHE_FIELD)


class AssocMemConfig(PretrainedConfig):
    """HF config of an assocmem hybrid; ``hybrid`` holds the HybridConfig as a dict."""

    model_type = "assocmem"
    keys_to_ignore_at_inference = [CACHE_FIELD]

    hybrid: dict | Any = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        hc = self.hybrid if isinstance(self.hybrid, HybridConfig) else HybridConfig.model_validate(self.hybrid or {})
        self.hybrid = hc.model_dump(mode="json")
        self._keep(hc)
        self.vocab_size, self.hidden_size = hc.vocab_size, hc.d_model
        self.num_hidden_layers, self.tie_word_embeddings = hc.depth, hc.tie_embeddings
        super().__post_init__(**kwargs)

    @property
    def hybrid_config(self) -> HybridConfig:
        """The HybridConfig of ``hybrid``, validated (and its layers resolved) once: again only if
        ``hybrid`` was replaced or edited since."""
        cached = self.__dict__.get(_HYBRID_CACHE)
        if cached is None or cached[0] != _key(self.hybrid):
            self._keep(HybridConfig.model_validate(self.hybrid))
        return self.__dict__[_HYBRID_CACHE][1]

    def _keep(self, hc: HybridConfig) -> None:
        self.__dict__[_HYBRID_CACHE] = (_key(self.hybrid), hc)  # not a config field: never serialised

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop(_HYBRID_CACHE, None)
        return out

    def signature(self) -> str:
        """A short hash of the architecture (the HybridConfig)."""
        return hashlib.sha1(_key(self.hybrid).encode()).hexdigest()[:12]


class AssocMemPreTrainedModel(PreTrainedModel):
    config_class = AssocMemConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]
    _is_stateful = True  # recurrent states cannot be rolled back (no assisted generation)
    supports_gradient_checkpointing = False

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model creates its own AssocMemCache

    @staticmethod
    def _finalize_model_loading(model, load_config, loading_info):
        """transformers' post-load step, then every tensor copied into freshly allocated memory:
        tensors loaded as views of the safetensors buffer can be unaligned, BLAS then rounds
        differently, and the logits would not be bit-identical to the saved model's."""
        loading_info = PreTrainedModel._finalize_model_loading(model, load_config, loading_info)
        with torch.no_grad():
            for tensor in list(model.parameters()) + list(model.buffers()):
                tensor.data = tensor.data.clone()
        return loading_info

    def _init_weights(self, module: nn.Module) -> None:
        """Normal(0, init_std) embeddings and linear maps, unit norms; mixer-specific parameters
        (decay rates, conv taps, spectral grids) keep their own constructors' init."""
        std = self.config.hybrid["init_std"]
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, WiolaRMSNorm):
            init.ones_(module.weight)
            init.zeros_(module.offset)


class AssocMemModel(AssocMemPreTrainedModel):
    """Embedding, the stack of blocks and the final RMSNorm."""

    def __init__(self, config: AssocMemConfig):
        super().__init__(config)
        hc = config.hybrid_config
        self.embed_tokens = nn.Embedding(hc.vocab_size, hc.d_model)
        self.embed_positions = (nn.Embedding(hc.max_positions, hc.d_model)
                                if hc.position_embedding == "learned" else None)
        self.layers = nn.ModuleList(
            Block(layer.spec, hc.d_model, mlp_hidden=hc.block_mlp_hidden(layer), norm_eps=hc.norm_eps, layer_idx=i,
                  form=layer.form, mlp_kind=hc.mlp_kind, norm=hc.block_norm, steer=hc.steer.get(i),
                  foh=hc.foh_layers.get(i))
            for i, layer in enumerate(hc.plan))
        self.norm = build_norm(hc.block_norm, hc.d_model, hc.norm_eps)
        self._streams = max((block.cross_layer_streams for block in self.layers), default=0)
        self._cache_token = uuid.uuid4().hex[:8]
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def new_cache(self) -> AssocMemCache:
        """An empty cache bound to this model."""
        return AssocMemCache(len(self.layers), signature=self._signature())

    def _signature(self) -> str:
        return f"{self.config.signature()}/{self._cache_token}"

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                cache: AssocMemCache | None = None, inputs_embeds: torch.Tensor | None = None,
                use_cache: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, past_key_values: AssocMemCache | None = None):
        """input_ids [B, T] (or inputs_embeds [B, T, d]); attention_mask [B, T] or [B, past + T];
        cache (or its older name past_key_values): an AssocMemCache to continue from.

        hidden_states (when asked): the residual stream entering the first block and after every
        block (before the final norm), L + 1 tensors [B, T, d].
        """
        h = self._embed(input_ids, inputs_embeds)
        B, T, _ = h.shape
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = self._cache(take_cache(cache, past_key_values), use_cache)
        mask = self._mask(attention_mask, B, T, 0 if cache is None else cache.seen_tokens)
        if self.embed_positions is not None:
            h = h + self._positions(T, 0 if cache is None else cache.seen_tokens, mask)
        hidden = [h] if output_hidden_states else None
        streams: list[torch.Tensor] = []  # residual streams entering the blocks, kept for cross-layer mixers (GCLA)
        for i, block in enumerate(self.layers):
            streams = (streams + [h])[-self._streams:] if self._streams else streams
            h, state = block(h, state=None if cache is None else cache[i], mask=mask, return_state=cache is not None,
                             streams=streams or None)
            if cache is not None:
                cache[i] = state
            if hidden is not None:
                hidden.append(h)
        if cache is not None:
            cache.seen_tokens += T
        out = BaseModelOutputWithPast(last_hidden_state=self.norm(h), **{CACHE_FIELD: cache},
                                      hidden_states=None if hidden is None else tuple(hidden))
        return out if return_dict is not False else out.to_tuple()

    def _embed(self, input_ids, inputs_embeds) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        if inputs_embeds is not None:
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.hidden_size:
                raise ValueError(f"inputs_embeds must be [B, T, {self.config.hidden_size}], "
                                 f"got {tuple(inputs_embeds.shape)}")
            return inputs_embeds
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point:
            raise ValueError(f"input_ids must be an integer tensor [B, T], got {input_ids.dtype} "
                             f"{tuple(input_ids.shape)}")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(f"input_ids out of range: min {int(input_ids.min())}, max {int(input_ids.max())}; "
                             f"allowed 0..{self.config.vocab_size - 1} (vocab_size {self.config.vocab_size})")
        return self.embed_tokens(input_ids)

    def _positions(self, T: int, past: int, mask: torch.Tensor | None) -> torch.Tensor:
        """The learned embeddings of positions past … past + T − 1: [T, d] (broadcast over the batch)."""
        limit = self.embed_positions.num_embeddings
        if mask is not None:
            raise ValueError("position_embedding: learned counts positions by column, so a padded batch would shift "
                             "them; pass sequences of equal length without padding")
        if past + T > limit:
            raise ValueError(f"positions {past}..{past + T - 1} exceed the learned position table "
                             f"(max_positions={limit})")
        return self.embed_positions(torch.arange(past, past + T, device=self.embed_positions.weight.device))

    def _cache(self, cache, use_cache: bool) -> AssocMemCache | None:
        if cache is None:
            return self.new_cache() if use_cache else None
        if not isinstance(cache, AssocMemCache):
            raise TypeError(f"cache (past_key_values) must be an AssocMemCache (from this model's forward or "
                            f"model.new_cache()), got {type(cache).__name__}")
        cache.bind(self._signature(), len(self.layers))
        return cache

    @staticmethod
    def _mask(attention_mask, B: int, T: int, past: int) -> torch.Tensor | None:
        """The [B, T] bool padding mask of the current tokens (None = no padding)."""
        if attention_mask is None:
            return None
        if attention_mask.dim() != 2 or attention_mask.shape[0] != B or attention_mask.shape[1] not in (T, past + T):
            raise ValueError(f"attention_mask must be [B, T] = [{B}, {T}] or [B, past + T] = [{B}, {past + T}], "
                             f"got {tuple(attention_mask.shape)}")
        mask = attention_mask[:, -T:].bool()
        return None if bool(mask.all()) else mask


class AssocMemForCausalLM(AssocMemPreTrainedModel, GenerationMixin):
    """AssocMemModel plus the LM head (tied to the embedding when tie_embeddings)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: AssocMemConfig):
        super().__init__(config)
        self.model = AssocMemModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def new_cache(self) -> AssocMemCache:
        return self.model.new_cache()

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                cache: AssocMemCache | None = None, inputs_embeds: torch.Tensor | None = None,
                labels: torch.LongTensor | None = None, use_cache: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                logits_to_keep: int = 0, past_key_values: AssocMemCache | None = None):
        """Logits [B, T, vocab] (the last ``logits_to_keep`` positions if > 0); loss = next-token
        cross-entropy on ``labels`` (shifted inside; -100 ignored). The cache comes as ``cache``
        (transformers >= 5.24) or ``past_key_values`` (earlier releases); the output holds it under
        the installed release's name (``output_cache(out)`` reads it either way)."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=take_cache(cache, past_key_values),
                         inputs_embeds=inputs_embeds, use_cache=use_cache, output_hidden_states=output_hidden_states)
        h = out.last_hidden_state
        logits = self.lm_head(h[:, -logits_to_keep:] if logits_to_keep else h)
        loss = None
        if labels is not None:
            flat = logits[:, :-1].flatten(0, 1)
            flat = flat if flat.dtype in (torch.float32, torch.float64) else flat.float()  # bf16/fp16 -> fp32
            loss = F.cross_entropy(flat, labels[:, 1:].flatten(), ignore_index=-100)
        result = CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: output_cache(out)},
                                        hidden_states=out.hidden_states)
        return result if return_dict is not False else result.to_tuple()


AutoConfig.register("assocmem", AssocMemConfig, exist_ok=True)
AutoModel.register(AssocMemConfig, AssocMemModel, exist_ok=True)
AutoModelForCausalLM.register(AssocMemConfig, AssocMemForCausalLM, exist_ok=True)
