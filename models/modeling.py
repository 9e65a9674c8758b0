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
from functools import partial
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.utils import logging

from assocmem.mixers.norm import RMSNorm
from assocmem.mixers.wiola import WiolaRMSNorm

from .blocks import Block, ResidualStreams, build_norm
from .cache import AssocMemCache
from .config import HybridConfig
from .extensions import ExtensionSlot
from .hf_kwargs import CACHE_FIELD, check_hf_kwargs, output_cache, take_cache
from .packed import packed_boundaries, run_packed
from .upgrade import upgrade_hybrid


logger = logging.get_logger(__name__)

_HYBRID_CACHE = "_hybrid_config_cache"


def _key(hybrid: dict) -> str:
    return json.dumps(hybrid, sort_keys=True)


# HF's names for the architecture fields -> the HybridConfig field each one is. One table: the config
# takes either name, refuses a contradiction, and writes both (the HF ones derived) when saved.
HF_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layers",
    "tie_word_embeddings": "tie_embeddings",
    "num_attention_heads": "num_heads",
    "intermediate_size": "mlp_hidden",
    "rms_norm_eps": "norm_eps",
    "initializer_range": "init_std",
}
# The HybridConfig value an HF name reads back (n_layers may be None: the pattern gives the depth).
_DERIVED = {"n_layers": lambda hc: hc.depth, "mlp_hidden": lambda hc: hc.mlp_width}


def _derived(hc: HybridConfig, field: str):
    return _DERIVED[field](hc) if field in _DERIVED else getattr(hc, field)


def merge_hf_fields(hybrid: HybridConfig | dict, given: dict[str, Any]) -> HybridConfig:
    """``hybrid`` with the HF-named values of ``given`` written into it, validated (once more only if
    something was written).

    A value that the hybrid already fixes differently is refused, naming both; a value the hybrid
    leaves open (absent or None) is taken. ``AssocMemConfig(hidden_size=128, num_hidden_layers=4,
    vocab_size=1000)`` is ``hybrid={"d_model": 128, "n_layers": 4, "vocab_size": 1000}``.
    """
    hc = hybrid if isinstance(hybrid, HybridConfig) else HybridConfig.model_validate(hybrid)
    fixed = hybrid.model_dump(exclude_unset=True) if isinstance(hybrid, HybridConfig) else hybrid
    changes = {}
    for hf_name, value in given.items():
        field = HF_FIELDS[hf_name]
        if value == _derived(hc, field):
            continue
        if fixed.get(field) is not None:
            raise ValueError(f"{hf_name}={value!r} contradicts hybrid.{field}={fixed[field]!r} (which gives "
                             f"{hf_name}={_derived(hc, field)!r}); give it once, as {hf_name} or as hybrid.{field}")
        changes[field] = value
    return HybridConfig.model_validate({**hc.model_dump(mode="json"), **changes}) if changes else hc


class AssocMemConfig(PretrainedConfig):
    """HF config of an assocmem hybrid; ``hybrid`` holds the HybridConfig as a dict.

    The HF names of HF_FIELDS (``hidden_size``, ``num_hidden_layers``, ``vocab_size``, ...) are
    accepted as the HybridConfig fields they stand for and are always written back from it.
    Other keyword arguments are kept as attributes, as every HF config does. A ``hybrid`` dict of an
    earlier layout (a saved model folder) is converted to the current one (models/upgrade.py).
    """

    model_type = "assocmem"
    keys_to_ignore_at_inference = [CACHE_FIELD]

    hybrid: dict | Any = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    tie_word_embeddings: bool | None = None
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        given = {name: kwargs.pop(name) if name in kwargs else getattr(self, name, None) for name in HF_FIELDS}
        hybrid = self.hybrid if isinstance(self.hybrid, HybridConfig) else upgrade_hybrid(dict(self.hybrid or {}))
        hc = merge_hf_fields(hybrid, {k: v for k, v in given.items() if v is not None})
        self.hybrid = hc.model_dump(mode="json")
        self._keep(hc)
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
        """Remember the validated ``hc`` (not a config field: never serialised) and write the HF names
        from it (those the hybrid leaves open, such as num_heads = None, are not set)."""
        self.__dict__[_HYBRID_CACHE] = (_key(self.hybrid), hc)
        for hf_name, field in HF_FIELDS.items():
            value = _derived(hc, field)
            if value is not None or getattr(self, hf_name, None) is not None:
                setattr(self, hf_name, value)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of the config; an HF name edited after construction (config.vocab_size = ...)
        without its hybrid field is refused, so a saved folder never contradicts itself."""
        hc = self.hybrid_config
        for hf_name, field in HF_FIELDS.items():
            value, derived = getattr(self, hf_name, None), _derived(hc, field)
            if value is not None and value != derived:
                raise ValueError(f"config.{hf_name}={value!r} but hybrid.{field} gives {derived!r}: change "
                                 f"config.hybrid[{field!r}] (the source of truth), not config.{hf_name}")
        out = super().to_dict()
        out.pop(_HYBRID_CACHE, None)
        return out

    def set_hybrid_field(self, field: str, value: Any) -> None:
        """Change one HybridConfig field (validated) and the HF names derived from it."""
        self.hybrid = HybridConfig.model_validate({**self.hybrid, field: value}).model_dump(mode="json")
        self.hybrid_config  # noqa: B018 - re-validates and writes the HF names

    def signature(self) -> str:
        """A short hash of the architecture (the HybridConfig)."""
        return hashlib.sha1(_key(self.hybrid).encode()).hexdigest()[:12]


class AssocMemPreTrainedModel(PreTrainedModel):
    config_class = AssocMemConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]
    _is_stateful = True  # recurrent states cannot be rolled back (no assisted generation)
    # activation_checkpointing_enable() (gradient_checkpointing_enable() before transformers 5.24): AssocMemModel
    # recomputes every block in backward (every_n_layers is not read: all blocks or none)
    supports_gradient_checkpointing = True

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


def _batch_shape(input_ids, inputs_embeds) -> tuple[int, int]:
    """(B, T) of the one input given."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("give exactly one of input_ids and inputs_embeds")
    tokens = input_ids if input_ids is not None else inputs_embeds
    if tokens.dim() < 2:
        name, layout = ("input_ids", "an integer tensor [B, T]") if input_ids is not None else ("inputs_embeds",
                                                                                              "[B, T, d]")
        raise ValueError(f"{name} must be {layout} with T >= 1 (B = 0 is allowed), got {tokens.dtype} "
                         f"{tuple(tokens.shape)}")
    return tokens.shape[0], tokens.shape[1]


def _run_block(block: Block, mask: torch.Tensor | None, h: torch.Tensor, *streams: torch.Tensor):
    """One block without a cache, every tensor that needs a gradient positional (as reentrant
    checkpointing requires): the hidden state, then the earlier residual streams it reads."""
    return block(h, state=None, mask=mask, return_state=False, streams=list(streams) or None)


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
                  form=layer.form, mlp_kind=hc.mlp_kind, norm=hc.block_norm, extensions=layer.extensions)
            for i, layer in enumerate(hc.plan))
        self.norm = ExtensionSlot(hc.model_extensions(), "the final norm").norm(
            hc.d_model, hc.norm_eps, default=lambda: build_norm(hc.block_norm, hc.d_model, hc.norm_eps))
        self.gradient_checkpointing = False  # set by activation_checkpointing_enable()
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
                return_dict: bool | None = None, past_key_values: AssocMemCache | None = None, **kwargs):
        """input_ids [B, T] (or inputs_embeds [B, T, d]); attention_mask [B, T] or [B, past + T];
        cache (or its older name past_key_values): an AssocMemCache to continue from (an empty
        DynamicCache is taken as a fresh one).

        hidden_states (when asked): the residual stream entering the first block and after every
        block (before the final norm), L + 1 tensors [B, T, d]. Other HF keywords: see HF_KWARGS.
        """
        cache = take_cache(cache, past_key_values)
        cu_seqlens = packed_boundaries(kwargs, *_batch_shape(input_ids, inputs_embeds),
                                       padded=attention_mask is not None, cached=cache is not None)
        if cu_seqlens is not None:
            return self.forward_packed(input_ids, inputs_embeds, cu_seqlens, attention_mask=attention_mask,
                                       cache=cache, use_cache=use_cache, output_hidden_states=output_hidden_states,
                                       return_dict=return_dict, **kwargs)
        h = self._embed(input_ids, inputs_embeds)
        B, T, _ = h.shape
        check_hf_kwargs(kwargs, past=0 if cache is None or not isinstance(cache, AssocMemCache) else cache.seen_tokens,
                        T=T)
        checkpointing = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        use_cache = self._use_cache(use_cache, cache, checkpointing)
        cache = self._cache(cache, use_cache)
        mask = self._mask(attention_mask, B, T, 0 if cache is None else cache.seen_tokens)
        if self.embed_positions is not None:
            h = h + self._positions(T, 0 if cache is None else cache.seen_tokens, mask)
        hidden = [h] if output_hidden_states else None
        streams = ResidualStreams(self.layers)  # for the blocks whose mixer reads earlier streams (GCLA)
        for i, block in enumerate(self.layers):
            earlier = streams.enter(block, h)
            if checkpointing:  # keep the inputs only; the block runs again in backward (no cache to write twice)
                h, state = self._gradient_checkpointing_func(partial(_run_block, block, mask), h, *earlier)
            else:
                h, state = block(h, state=None if cache is None else cache[i], mask=mask,
                                 return_state=cache is not None, streams=earlier or None)
            if cache is not None:
                cache[i] = state
            if hidden is not None:
                hidden.append(h)
        if cache is not None:
            cache.seen_tokens += T
        out = BaseModelOutputWithPast(last_hidden_state=self.norm(h), **{CACHE_FIELD: cache},
                                      hidden_states=None if hidden is None else tuple(hidden))
        return out if return_dict is not False else out.to_tuple()

    def forward_packed(self, input_ids, inputs_embeds, cu_seqlens: torch.Tensor, *, attention_mask=None, cache=None,
                       use_cache: bool | None = None, output_hidden_states: bool | None = None,
                       return_dict: bool | None = None, **kwargs):
        """The forward of packed documents: input_ids [B, T] (or inputs_embeds [B, T, d]) laid end to
        end as one row [1, B·T] split at cu_seqlens [N + 1] (``packed_boundaries``). The whole stack runs
        on each group of equal-length documents and the outputs go back to their places: [B, T, d]."""
        refused = {"attention_mask": attention_mask is not None, "a cache": cache is not None or bool(use_cache),
                   "output_hidden_states": bool(output_hidden_states)}
        if any(refused.values()):
            raise ValueError(f"packed documents cannot be combined with "
                             f"{[name for name, given in refused.items() if given]}: pad the documents into a "
                             f"batch for those")
        B, T = _batch_shape(input_ids, inputs_embeds)
        check_hf_kwargs(kwargs, past=0, T=T)
        tokens = input_ids if input_ids is not None else inputs_embeds
        row = tokens.reshape(1, B * T, *tokens.shape[2:])                     # [1, B·T] or [1, B·T, d]

        def stack(group, _state):
            ids, embeds = (group, None) if input_ids is not None else (None, group)
            return self.forward(input_ids=ids, inputs_embeds=embeds, use_cache=False).last_hidden_state, None

        h, _ = run_packed(stack, row, cu_seqlens, return_state=False)
        out = BaseModelOutputWithPast(last_hidden_state=h.reshape(B, T, h.shape[-1]), **{CACHE_FIELD: None})
        return out if return_dict is not False else out.to_tuple()

    def _embed(self, input_ids, inputs_embeds) -> torch.Tensor:
        _batch_shape(input_ids, inputs_embeds)
        if inputs_embeds is not None:
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.hidden_size or \
                    inputs_embeds.shape[1] < 1:
                raise ValueError(f"inputs_embeds must be [B, T, {self.config.hidden_size}] with T >= 1, "
                                 f"got {tuple(inputs_embeds.shape)}")
            return inputs_embeds
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.shape[1] < 1:
            raise ValueError(f"input_ids must be an integer tensor [B, T] with T >= 1 (B = 0 is allowed), "
                             f"got {input_ids.dtype} {tuple(input_ids.shape)}")
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

    def _use_cache(self, use_cache: bool | None, cache: AssocMemCache | None, checkpointing: bool) -> bool:
        """Whether this forward keeps a cache. Under gradient checkpointing it does not: the block's
        recompute in backward would write the states a second time."""
        if not checkpointing:
            return self.config.use_cache if use_cache is None else use_cache
        if cache is not None:
            raise ValueError("a cache cannot be continued under gradient checkpointing (the recompute would write "
                             "it twice): decode in model.eval() or under torch.no_grad(), or call "
                             "activation_checkpointing_disable() (gradient_checkpointing_disable() before "
                             "transformers 5.24)")
        if use_cache:
            logger.warning_once("use_cache=True is ignored under gradient checkpointing (training mode)")
        return False

    def _cache(self, cache, use_cache: bool) -> AssocMemCache | None:
        if cache is None:
            return self.new_cache() if use_cache else None
        if isinstance(cache, Cache) and not isinstance(cache, AssocMemCache):
            if cache.get_seq_length() == 0:  # e.g. generate(past_key_values=DynamicCache()): start ours
                return self.new_cache()
            raise TypeError(f"a {type(cache).__name__} holding {cache.get_seq_length()} tokens of key/value "
                            f"pairs cannot continue an assocmem model (its layers keep recurrent states): pass "
                            f"the AssocMemCache of an earlier forward, model.new_cache(), or an empty cache")
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

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """transformers' resize (embedding and tied head), then the vocabulary written into the
        HybridConfig too, so that the saved folder loads with the new size."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self.config.set_hybrid_field("vocab_size", embeddings.num_embeddings)
        return embeddings

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                cache: AssocMemCache | None = None, inputs_embeds: torch.Tensor | None = None,
                labels: torch.LongTensor | None = None, use_cache: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                logits_to_keep: int = 0, past_key_values: AssocMemCache | None = None,
                num_items_in_batch: int | torch.Tensor | None = None, **kwargs):
        """Logits [B, T, vocab] (the last ``logits_to_keep`` positions if > 0); loss = next-token
        cross-entropy on ``labels`` (shifted inside; -100 ignored). The cache comes as ``cache``
        (transformers >= 5.24) or ``past_key_values`` (earlier releases); the output holds it under
        the installed release's name (``output_cache(out)`` reads it either way).

        num_items_in_batch (HF Trainer, gradient accumulation): the loss is the sum over this batch's
        labelled tokens divided by it, so accumulated micro-batches average over all their tokens."""
        cache = take_cache(cache, past_key_values)
        cu_seqlens = packed_boundaries(kwargs, *_batch_shape(input_ids, inputs_embeds),
                                       padded=attention_mask is not None, cached=cache is not None)
        call = self.model if cu_seqlens is None else partial(self.model.forward_packed, cu_seqlens=cu_seqlens)
        out = call(input_ids=input_ids, attention_mask=attention_mask, cache=cache, inputs_embeds=inputs_embeds,
                   use_cache=use_cache, output_hidden_states=output_hidden_states, **kwargs)
        h = out.last_hidden_state
        logits = self.lm_head(h[:, -logits_to_keep:] if logits_to_keep else h)
        loss = None
        if labels is not None and cu_seqlens is not None:
            labels = labels.clone()  # a document's first token is not predicted from the one before
            labels.view(-1)[cu_seqlens[1:-1].to(labels.device)] = -100  # [B, T] laid end to end as cu_seqlens has it
        if labels is not None:
            flat = logits[:, :-1].flatten(0, 1)
            flat = flat if flat.dtype in (torch.float32, torch.float64) else flat.float()  # bf16/fp16 -> fp32
            if num_items_in_batch is None:
                loss = F.cross_entropy(flat, labels[:, 1:].flatten(), ignore_index=-100)
            else:
                loss = F.cross_entropy(flat, labels[:, 1:].flatten(), ignore_index=-100, reduction="sum")
                loss = loss / torch.as_tensor(num_items_in_batch, device=loss.device)
        result = CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: output_cache(out)},
                                        hidden_states=out.hidden_states)
        return result if return_dict is not False else result.to_tuple()


AutoConfig.register("assocmem", AssocMemConfig, exist_ok=True)
AutoModel.register(AssocMemConfig, AssocMemModel, exist_ok=True)
AutoModelForCausalLM.register(AssocMemConfig, AssocMemForCausalLM, exist_ok=True)
