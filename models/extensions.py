"""Block extensions: a paper's components plugged into a hybrid's blocks through one config field.

    HybridConfig(d_model=64, vocab_size=257, layers="attn", n_layers=6, extensions=[
        {"kind": "steer", "layers": [0, 1], "band": "lowpass", "cutoff": 8, "mode": "causal", "seq_len": 128},
        {"kind": "foh", "layers": [2], "mode": "causal", "seq_len": 128}])

An extension names the blocks it applies to (``layers``, 0-indexed; omitted: every block, and then
the model's final norm too) and provides some of a block's hooks, here in the order a block uses them
(models/blocks.py):

    norm      the block's two pre-norms (and the final norm)      module(d_model, eps)
    mixer     the block's mixer instead of its spec's module       a MixerModule (mixers/layer.py)
    mlp       the block's MLP, where the block has one             [..., d] -> [..., d]
    residual  the block's output y from its input x and h = x + mixer + MLP: a module with
              forward(x, h, *, state, mask, return_state) -> (y, its decode state) and
              check_continue(layer_idx), which refuses a decode it cannot continue

A block takes each hook from at most one extension (two are refused, naming both). The kinds:

    foh              mixer     seed 003's Fourier-Only Attention (mixers/foh.py)
    steer            residual  seed 003's spectral steering y = x + F(h − x) (models/steer.py)
    wiola_attention  mixer     Wiola's attention: SRPE, GCLA, ATM, output gate (mixers/wiola/attention.py)
    dsff             mlp       Wiola's dual-stream feed-forward (mixers/wiola/dsff.py)
    wiola_norm       norm      WiolaRMSNorm γ ⊙ (x + δ)/RMS(x + δ) (mixers/wiola/norm.py)

A new kind is a subclass of ``Extension`` with ``kind: Literal["name"]``, its fields, the names of
the hooks it provides in ``hooks`` and those hook methods, registered with ``@register``.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

import torch.nn as nn
from pydantic import BaseModel, ConfigDict, Field

from assocmem.memories import NonParametric
from assocmem.mixers.foh import FOHConfig, FourierOnlyAttention
from assocmem.mixers.layer import attention_arguments
from assocmem.mixers.parallel import ParallelSpec
from assocmem.mixers.spec import MixerSpec
from assocmem.mixers.wiola import DSFF, DSFFOptions, WiolaAttention, WiolaAttentionOptions, WiolaRMSNorm

from .steer import SteerConfig, SteeredUpdate

HOOKS = ("norm", "mixer", "mlp", "residual")


class Extension(BaseModel):
    """One entry of ``HybridConfig.extensions``: its kind, the blocks it applies to, its options."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite

    kind: str = Field(description="the registered kind (EXTENSIONS)")
    layers: list[int] | None = Field(None, description="0-indexed blocks it applies to; None = every block "
                                     "(and the final norm)")
    hooks: ClassVar[tuple[str, ...]] = ()  # the hooks of HOOKS this kind provides

    def check(self, spec: MixerSpec | ParallelSpec, layer_idx: int) -> None:
        """Refuse (ValueError) a layer this extension cannot apply to; by default every layer."""

    # a kind defines the methods of the hooks it names (their signatures: the module docstring's table):
    # norm(d_model, eps), mixer(spec, d_model, *, form, layer_idx), mlp(d_model, hidden), residual()


class ExtensionRegistry:
    """Extension kinds by name: a name is registered once; a missing one lists the registered ones."""

    def __init__(self):
        self._kinds: dict[str, type[Extension]] = {}

    def register(self, cls: type[Extension]) -> type[Extension]:
        name = cls.model_fields["kind"].default
        if not isinstance(name, str):
            raise TypeError(f"{cls.__name__} needs a default kind (kind: Literal['name'] = 'name')")
        if name in self._kinds:
            raise ValueError(f"an extension kind named {name!r} is already registered ({self._kinds[name].__name__}); "
                             f"choose another name")
        unknown = sorted(set(cls.hooks) - set(HOOKS))
        if unknown:
            raise ValueError(f"{cls.__name__}.hooks names {unknown}; the hooks are {list(HOOKS)}")
        missing = [hook for hook in cls.hooks if not callable(getattr(cls, hook, None))]
        if missing:
            raise ValueError(f"{cls.__name__}.hooks names {missing} but the class defines no such method")
        self._kinds[name] = cls
        return cls

    def __getitem__(self, name: str) -> type[Extension]:
        if name not in self._kinds:
            raise ValueError(f"unknown extension kind {name!r}; registered kinds: {sorted(self._kinds)}")
        return self._kinds[name]

    def __contains__(self, name: str) -> bool:
        return name in self._kinds

    def names(self) -> list[str]:
        return sorted(self._kinds)

    def parse(self, value: Any) -> Extension:
        """An Extension from a dict {kind: ..., ...} (or an Extension, kept)."""
        if isinstance(value, Extension):
            return value
        if not isinstance(value, dict) or "kind" not in value:
            raise ValueError(f"an extension is a mapping with a kind (one of {self.names()}), got {value!r}")
        return self[value["kind"]].model_validate(value)


EXTENSIONS = ExtensionRegistry()
register = EXTENSIONS.register


class ExtensionSlot:
    """The extensions of one block, by hook: each hook from at most one of them."""

    def __init__(self, extensions: tuple[Extension, ...] | list[Extension], where: str):
        self.by_hook: dict[str, Extension] = {}
        for ext in extensions:
            for hook in ext.hooks:
                if hook in self.by_hook:
                    raise ValueError(f"{where}: the extensions {self.by_hook[hook].kind!r} and {ext.kind!r} both "
                                     f"provide its {hook}; apply one of them to this layer")
                self.by_hook[hook] = ext

    def provides(self, hook: str) -> bool:
        return hook in self.by_hook

    def norm(self, d_model: int, eps: float, *, default: Callable[[], nn.Module]) -> nn.Module:
        ext = self.by_hook.get("norm")
        return default() if ext is None else ext.norm(d_model, eps)

    def mixer(self, spec, d_model: int, *, form, layer_idx: int, default: Callable[[], nn.Module]) -> nn.Module:
        ext = self.by_hook.get("mixer")
        return default() if ext is None else ext.mixer(spec, d_model, form=form, layer_idx=layer_idx)

    def mlp(self, d_model: int, hidden: int, *, default: Callable[[], nn.Module | None]) -> nn.Module | None:
        ext = self.by_hook.get("mlp")
        return default() if ext is None else ext.mlp(d_model, hidden)

    def residual(self) -> nn.Module | None:
        ext = self.by_hook.get("residual")
        return None if ext is None else ext.residual()


# ---------------------------------------------------------------- the kinds
@register
class FOH(FOHConfig, Extension):
    """The layer's mixer is seed 003's Fourier-Only Attention: {mode: circular | causal, seq_len}."""

    kind: Literal["foh"] = "foh"
    hooks: ClassVar[tuple[str, ...]] = ("mixer",)

    def mixer(self, spec, d_model, *, form, layer_idx):
        return FourierOnlyAttention(d_model, seq_len=self.seq_len, mode=self.mode, layer_idx=layer_idx)


@register
class Steering(SteerConfig, Extension):
    """Spectral steering of the block's update: {band: lowpass | highpass, cutoff, mode: circular | causal,
    seq_len} (seed 003's ST-1)."""

    kind: Literal["steer"] = "steer"
    hooks: ClassVar[tuple[str, ...]] = ("residual",)

    def residual(self):
        return SteeredUpdate(SteerConfig(band=self.band, cutoff=self.cutoff, mode=self.mode, seq_len=self.seq_len))


@register
class WiolaAttentionExtension(WiolaAttentionOptions, Extension):
    """The layer's softmax attention becomes Wiola's: {srpe, output_gate, cross_layer, token_merge}."""

    kind: Literal["wiola_attention"] = "wiola_attention"
    hooks: ClassVar[tuple[str, ...]] = ("mixer",)

    def check(self, spec, layer_idx):
        if not (isinstance(spec, MixerSpec) and isinstance(spec.memory, NonParametric)):
            raise ValueError(f"extension wiola_attention applies to softmax-attention layers; layer {layer_idx} is "
                             f"{getattr(spec, 'name', None) or type(spec).__name__}")

    def mixer(self, spec, d_model, *, form, layer_idx):
        self.check(spec, layer_idx)
        options = WiolaAttentionOptions.model_validate(self.model_dump(include=set(WiolaAttentionOptions.model_fields)))
        module = WiolaAttention(d_model, **dict(options), **attention_arguments(spec, form, layer_idx))
        module.spec = spec
        return module


@register
class DSFFExtension(DSFFOptions, Extension):
    """The block's MLP is Wiola's DSFF: {hidden_a, hidden_b}."""

    kind: Literal["dsff"] = "dsff"
    hooks: ClassVar[tuple[str, ...]] = ("mlp",)

    def mlp(self, d_model, hidden):
        return DSFF(d_model, self.hidden_a, self.hidden_b)


@register
class WiolaNorm(Extension):
    """The block's pre-norms (and, on every block, the final norm) are WiolaRMSNorm (Wiola eq. 9)."""

    kind: Literal["wiola_norm"] = "wiola_norm"
    hooks: ClassVar[tuple[str, ...]] = ("norm",)

    def norm(self, d_model, eps):
        return WiolaRMSNorm(d_model, eps=eps)
