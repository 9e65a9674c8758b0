"""HybridConfig: a language model as a stack of mixer specs.

    HybridConfig(d_model=768, vocab_size=32000, layers="gdn*3,attn", n_layers=12)
    HybridConfig(d_model=768, vocab_size=32000, layers="gdn", n_layers=12, attention_layers=[3, 7, 11])
    HybridConfig(d_model=64, vocab_size=256, layers=["sca", "sca", my_spec])
    HybridConfig(d_model=64, vocab_size=257, layers="attn", n_layers=6,
                 extensions=[{"kind": "foh", "layers": [2], "mode": "causal", "seq_len": 128}])

``layers`` is a pattern string (comma-separated layer names, ``name*k`` for k
copies; the pattern is repeated to fill ``n_layers``) or a list whose entries
are layer names, MixerSpecs or MixerSpec dicts (YAML). Names are presets or
aliases of ``assocmem.mixers`` ("attn", "gdn", "swa", "sca", "mamba2", ...).
``attention_layers`` then replaces the listed (0-indexed) layers by
``attention``.

A parallel layer (thesis Fig. A.4) splits the heads of one layer between mixers:
``par(gdn,attn)`` runs gdn on half of the heads and attention on the other half,
``par(gdn*3,attn)`` gives gdn three shares of four (mixers/parallel.py). The heads
split are the hybrid-wide ``num_heads`` (or d_model // ``head_dim``), else the first
branch preset's; every branch keeps that head width. In a list, a ParallelSpec (or a
dict with ``branches``) is a parallel layer given in full.

Named layers take their LayerOptions from the preset, updated by the
hybrid-wide ``num_heads``/``head_dim`` (the other is d_model // given) and then
by ``overrides[name]`` (its ``attention:`` / ``sca:`` sub-dicts update the preset's
field by field). A MixerSpec given as an object is used exactly as is.

Validation resolves every layer once into ``plan`` (one ``LayerPlan`` per layer: name,
MixerSpec, requested form, whether its block has an MLP): the pattern is expanded once
and each distinct layer name looked up once; ``layer_specs()``, ``layer_forms()``,
``mlp_flags()`` and ``depth`` read the plan (rebuilt only if a field changed since).

``extensions`` plugs a paper's components into the blocks (FOH, steering, Wiola's attention,
DSFF, WiolaRMSNorm: models/extensions.py); each entry names its kind and the layers it applies to,
and the plan lists each layer's extensions. A saved config of an earlier layout is converted when a
model folder is loaded (models/upgrade.py).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializeAsAny, field_validator, model_validator

from assocmem.memories import NonParametric
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.parallel import ParallelSpec
from assocmem.mixers.yaml_text import load_yaml, read_yaml_file

from .extensions import EXTENSIONS, Extension, ExtensionSlot

LayerEntry = str | MixerSpec | ParallelSpec


class LayerPlan(NamedTuple):
    """Layer i of a hybrid, resolved."""

    name: str | None  # its name in the pattern (preset or alias), or its MixerSpec's name
    spec: MixerSpec | ParallelSpec
    form: str | tuple[str, ...]  # the requested form ('auto' or a form of the spec's class); one per branch if parallel
    mlp: bool  # whether its block has an MLP (HybridConfig.mlp_kind, or an extension's)
    extensions: tuple[Extension, ...]  # the extensions applied to its block

_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)(?:\*(\d+))?$")
_PAR = re.compile(r"^(par\([^()]*\))(?:\*(\d+))?$")


class HybridConfig(BaseModel):
    """A hybrid language model: width, vocabulary and the mixer of every layer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # every float finite

    name: str | None = Field(None, description="optional label (preset name or your own)")
    d_model: int = Field(256, gt=0, description="residual stream width")
    vocab_size: int = Field(32000, gt=0, description="number of token ids")
    layers: str | list[LayerEntry] = Field(
        "attn", description="pattern string ('sca,sca,attn', 'gdn*3,attn', 'par(gdn,attn)*2') or list of names / "
        "MixerSpecs / ParallelSpecs")
    n_layers: int | None = Field(None, gt=0, description="depth; the pattern is repeated to fill it "
                                 "(None = the pattern's own length)")
    attention_layers: list[int] | None = Field(
        None, description="0-indexed layers replaced by `attention` (thesis Table 4.1 placements)")
    attention: LayerEntry = Field("attn", description="the mixer placed at attention_layers")
    num_heads: int | None = Field(None, gt=0, description="heads of every named layer (head_dim = d_model // num_heads)")
    head_dim: int | None = Field(None, gt=0, description="head width of every named layer (num_heads = d_model // head_dim)")
    overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="LayerOptions updates per layer name, e.g. {'attn': {'attention': {'num_kv_heads': 4}}}")
    form: str = Field("auto", description="form of every layer's op: 'auto' (fastest exact) or 'recurrent'")
    backend: Literal["auto", "torch", "compiled", "fla"] | None = Field(
        None, description="layer.backend of every named layer (the kernels that run its op, mixers/kernels.py: "
        "auto, torch, compiled or fla); null: the preset's (auto); overrides[name] still win")
    forms: dict[str, str] = Field(
        default_factory=dict, description="form per layer name (or MixerSpec name), e.g. {'gdn': 'chunk'}")
    mlp_ratio: float = Field(4.0, ge=0, description="SwiGLU hidden = mlp_ratio · d_model; 0 = no MLP")
    mlp_hidden: int | None = Field(None, gt=0, description="explicit SwiGLU hidden width (overrides mlp_ratio)")
    mlp_layers: Literal["all", "attention"] | list[int] = Field(
        "all", description="which blocks have an MLP: all, only the attention (nonparametric) ones, or indices")
    mlp_kind: Literal["swiglu", "relu"] = Field(
        "swiglu", description="swiglu: (SiLU(x W_g) ⊙ x W_u) W_d; relu: ReLU(x W_in + b_in) W_out + b_out "
        "(the MLP of Nanda et al. 2023's grokking model), both of width mlp_hidden or mlp_ratio · d_model")
    tie_embeddings: bool = Field(True, description="lm_head shares the embedding matrix")
    block_norm: Literal["rmsnorm", "none"] = Field(
        "rmsnorm", description="the pre-norms of every block and the final norm: rmsnorm, or none (Nanda et al. "
        "2023's one-layer model has no LayerNorm)")
    position_embedding: Literal["none", "learned"] = Field(
        "none", description="absolute positions added to the token embeddings: none (position comes from the "
        "mixers: RoPE, recurrence, convolution) or learned (a [max_positions, d_model] table, as GPT-2 and "
        "Nanda et al. 2023; positions count columns, so padded batches are refused)")
    max_positions: int | None = Field(
        None, gt=0, description="rows of the learned position table (required with position_embedding: learned); "
        "longer inputs are refused")
    extensions: list[SerializeAsAny[Extension]] = Field(
        default_factory=list, description="a paper's components in the blocks, each {kind, layers (0-indexed; "
        "omitted: every block), its options}: foh, steer, wiola_attention, dsff, wiola_norm (models/extensions.py)")
    norm_eps: float = Field(1e-6, gt=0, description="epsilon of the block and final norms")
    init_std: float = Field(0.02, gt=0, description="std of the normal init of embeddings and projections")

    @field_validator("layers", mode="before")
    @classmethod
    def _coerce_layers(cls, value):
        if isinstance(value, list):
            return [_entry_from_dict(v) if isinstance(v, dict) else v for v in value]
        return value

    @field_validator("extensions", mode="before")
    @classmethod
    def _parse_extensions(cls, value):
        return [EXTENSIONS.parse(v) for v in value] if isinstance(value, list) else value

    @field_validator("attention", mode="before")
    @classmethod
    def _coerce_attention(cls, value):
        return _entry_from_dict(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _resolve(self) -> "HybridConfig":
        if self.num_heads is not None and self.head_dim is not None and self.num_heads * self.head_dim != self.d_model:
            raise ValueError(f"num_heads · head_dim must equal d_model: {self.num_heads} · {self.head_dim} "
                             f"!= {self.d_model}; give only one of them")
        for name, width in (("num_heads", self.num_heads), ("head_dim", self.head_dim)):
            if width is not None and self.d_model % width:
                raise ValueError(f"{name}={width} does not divide d_model={self.d_model}")
        if (self.position_embedding == "learned") != (self.max_positions is not None):
            raise ValueError("position_embedding: learned needs max_positions (the rows of the table), and "
                             "max_positions is only used with position_embedding: learned")
        entries = self.layer_entries()  # raises on a bad pattern or depth
        names = {n for e in entries if isinstance(e, str) for n in ([b for b, _ in _branches(e)] or [e])}
        for field in ("overrides", "forms"):
            spec_names = {n for e in entries for n in _spec_names(e)} if field == "forms" else set()
            unknown = sorted(set(getattr(self, field)) - names - spec_names)
            if unknown:
                raise ValueError(f"{field} name layers {unknown} that are not in the model; layer names used: "
                                 f"{sorted(names | spec_names)}")
        for j, ext in enumerate(self.extensions):
            if ext.layers is not None:
                _check_indices(f"extensions[{j}] ({ext.kind}) layers", ext.layers, len(entries))
        if isinstance(self.mlp_layers, list):
            _check_indices("mlp_layers", self.mlp_layers, len(entries))
        self._plan, self._plan_key = self._resolve_plan(entries), self._fingerprint()  # errors surface here
        return self

    # ------------------------------------------------------------ the per-layer plan
    _plan: tuple[LayerPlan, ...] | None = PrivateAttr(None)
    _plan_key: str | None = PrivateAttr(None)

    @property
    def plan(self) -> tuple[LayerPlan, ...]:
        """One ``LayerPlan`` per layer, resolved at validation (again only if a field changed since)."""
        key = self._fingerprint()
        if self._plan is None or key != self._plan_key:
            self._plan, self._plan_key = self._resolve_plan(self.layer_entries()), key
        return self._plan

    def _fingerprint(self) -> str:
        return self.model_dump_json()

    def _resolve_plan(self, entries: list[LayerEntry]) -> tuple[LayerPlan, ...]:
        """Every layer's spec (each distinct name looked up once), form and MLP flag."""
        specs: dict[str, MixerSpec] = {}
        for e in entries:
            if isinstance(e, str) and e not in specs:
                specs[e] = self._spec(e)
        resolved = [specs[e] if isinstance(e, str) else e for e in entries]
        names = [e if isinstance(e, str) else e.name for e in entries]
        forms = [self._form(n, spec) for n, spec in zip(names, resolved)]
        extensions = [self.layer_extensions(i, spec) for i, spec in enumerate(resolved)]
        mlp = self._mlp_flags(resolved, extensions)
        return tuple(LayerPlan(*row) for row in zip(names, resolved, forms, mlp, extensions))

    def layer_extensions(self, i: int, spec: MixerSpec | ParallelSpec) -> tuple[Extension, ...]:
        """The extensions applied to layer i, checked against its spec and against each other."""
        chosen = tuple(e for e in self.extensions if e.layers is None or i in e.layers)
        ExtensionSlot(chosen, f"layer {i}")  # raises when two provide the same hook
        for ext in chosen:
            ext.check(spec, i)
        return chosen

    def model_extensions(self) -> tuple[Extension, ...]:
        """The extensions applied to every block (``layers`` omitted): they also build the final norm."""
        return tuple(e for e in self.extensions if e.layers is None)

    def layer_entries(self) -> list[LayerEntry]:
        """One entry (name or MixerSpec) per layer, after pattern expansion and attention placement."""
        base = expand_pattern(self.layers) if isinstance(self.layers, str) else list(self.layers)
        if not base:
            raise ValueError("layers is empty; give a pattern such as 'gdn*3,attn' or a list of layers")
        n = len(base) if self.n_layers is None else self.n_layers
        if n % len(base):
            raise ValueError(f"the layer pattern has {len(base)} layers, which does not divide n_layers={n}; "
                             f"use a pattern whose length divides the depth or give every layer")
        entries = base * (n // len(base))
        if self.attention_layers is not None:
            _check_indices("attention_layers", self.attention_layers, n)
            for i in self.attention_layers:
                entries[i] = self.attention
        return entries

    def _form(self, name: str | None, spec: MixerSpec | ParallelSpec) -> str | tuple[str, ...]:
        """``forms[name]``, else ``form``; a parallel layer: one per branch, by the branch's name in the
        pattern (or its MixerSpec's name)."""
        if isinstance(spec, ParallelSpec):
            pattern = name is not None and name.startswith("par(")
            names = [b for b, _ in _branches(name)] if pattern else [b.name for b in spec.branches]
            return tuple(self.forms.get(n, self.form) if n is not None else self.form for n in names)
        return self.forms.get(name, self.form) if name is not None else self.form

    def layer_specs(self) -> list[MixerSpec | ParallelSpec]:
        """The MixerSpec (or ParallelSpec) of every layer."""
        return [layer.spec for layer in self.plan]

    def mixer_specs(self) -> list[MixerSpec]:
        """Every MixerSpec in the model, layer by layer, a parallel layer's branches in order."""
        return [b for s in self.layer_specs() for b in _mixers(s)]

    def layer_forms(self) -> list[str | tuple[str, ...]]:
        """The requested form of every layer (``forms[name]``, else ``form``)."""
        return [layer.form for layer in self.plan]

    def mlp_flags(self) -> list[bool]:
        """Whether block i has an MLP."""
        return [layer.mlp for layer in self.plan]

    def _spec(self, name: str, heads: tuple[int, int] | None = None) -> MixerSpec | ParallelSpec:
        """The preset ``name`` with the hybrid-wide heads (or ``heads`` = (num_heads, head_dim), a
        parallel branch's share) and ``overrides[name]`` applied; a ``par(...)`` token: its ParallelSpec."""
        if name.startswith("par("):
            return self._parallel(name)
        try:
            spec = get_preset(name)
        except KeyError as err:
            raise ValueError(f"unknown layer name {name!r}: {err.args[0]}") from None
        update: dict[str, Any] = {}
        if heads is not None:
            update.update(num_heads=heads[0], head_dim=heads[1])
        elif self.num_heads is not None or self.head_dim is not None:
            n = self.num_heads or self.d_model // self.head_dim
            update.update(num_heads=n, head_dim=self.d_model // n)
        if self.backend is not None:
            update["backend"] = self.backend
        update.update(self.overrides.get(name, {}))
        if not update:
            return spec
        data = spec.model_dump()
        data["layer"] = _update_layer(data["layer"], update)
        return MixerSpec.model_validate(data)

    def _parallel(self, token: str) -> ParallelSpec:
        """``par(a*s_a,b*s_b,...)``: branch a on s_a / Σs of the heads, b on s_b / Σs, ... (shares default 1)."""
        branches = _branches(token)
        if len(branches) < 2:
            raise ValueError(f"layers: {token!r} has {len(branches)} branch; a parallel layer needs at least 2, "
                             f"e.g. 'par(gdn,attn)'")
        if self.num_heads is not None or self.head_dim is not None:
            total = self.num_heads or self.d_model // self.head_dim
            head_dim, source = self.d_model // total, "num_heads"
        else:
            first = self._spec(branches[0][0]).layer
            total, head_dim, source = first.num_heads, first.head_dim, f"{branches[0][0]}'s preset num_heads"
        shares = sum(s for _, s in branches)
        if total % shares:
            allowed = [shares * m for m in range(1, 5)]
            raise ValueError(f"layers: {token!r} splits the heads into {shares} equal shares, which does not divide "
                             f"{source}={total}; num_heads must be a multiple of {shares} (e.g. {allowed}) "
                             f"or change the shares")
        per = total // shares
        return ParallelSpec(name=token, branches=[self._spec(b, (s * per, head_dim)) for b, s in branches])

    def _mlp_flags(self, specs: list[MixerSpec | ParallelSpec], extensions: list[tuple[Extension, ...]]) -> list[bool]:
        """Block i has an MLP if ``mlp_layers`` picks it and it has a width (or an extension builds it)."""
        if self.mlp_layers == "all":
            picked = [True] * len(specs)
        elif self.mlp_layers == "attention":
            picked = [any(isinstance(b.memory, NonParametric) for b in _mixers(s)) for s in specs]
        else:
            picked = [i in set(self.mlp_layers) for i in range(len(specs))]
        width = self.mlp_ratio != 0 or self.mlp_hidden is not None
        return [p and (width or _builds_mlp(e)) for p, e in zip(picked, extensions)]

    @property
    def mlp_width(self) -> int:
        """SwiGLU / ReLU hidden width (mlp_hidden, else mlp_ratio · d_model)."""
        return self.mlp_hidden if self.mlp_hidden is not None else int(round(self.mlp_ratio * self.d_model))

    def block_mlp_hidden(self, layer: LayerPlan) -> int:
        """The ``mlp_hidden`` a block of ``layer`` gets: 0 = no MLP (an extension's MLP has its own widths)."""
        if not layer.mlp:
            return 0
        return max(self.mlp_width, 1) if _builds_mlp(layer.extensions) else self.mlp_width

    @property
    def depth(self) -> int:
        return len(self.plan)

    # ------------------------------------------------------------ YAML
    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_yaml(cls, source: str | Path) -> "HybridConfig":
        """Parse YAML text or a path to a .yaml/.yml/.json file."""
        is_path = isinstance(source, Path) or ("\n" not in source and source.endswith((".yaml", ".yml", ".json")))
        data = read_yaml_file(source) if is_path else load_yaml(source, source="the HybridConfig YAML")
        if not isinstance(data, dict):
            raise ValueError(f"a HybridConfig document must be a mapping, got {type(data).__name__}")
        return cls.model_validate(data)


def _builds_mlp(extensions: tuple[Extension, ...]) -> bool:
    return ExtensionSlot(extensions, "").provides("mlp")


def _update_layer(layer: dict, update: dict) -> dict:
    """LayerOptions fields ``layer`` updated by ``update``; a sub-model dict (``attention``, ``sca``)
    is updated key by key, so an override keeps the preset's other sub-model fields."""
    out = dict(layer)
    for key, value in update.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _entry_from_dict(value: dict) -> MixerSpec | ParallelSpec:
    """A layer given as a dict (YAML): a ParallelSpec if it has ``branches``, else a MixerSpec."""
    return ParallelSpec.model_validate(value) if "branches" in value else MixerSpec.model_validate(value)


def _mixers(spec: MixerSpec | ParallelSpec) -> list[MixerSpec]:
    """The MixerSpecs of one layer: a parallel layer's branches, else the spec itself."""
    return list(spec.branches) if isinstance(spec, ParallelSpec) else [spec]


def _spec_names(entry: LayerEntry) -> list[str]:
    """Names a ``forms`` key may use for a MixerSpec / ParallelSpec entry (its branches' names)."""
    if isinstance(entry, ParallelSpec):
        return [b.name for b in entry.branches if b.name]
    return [entry.name] if isinstance(entry, MixerSpec) and entry.name else []


def _top_level(pattern: str) -> list[str]:
    """Split ``pattern`` at the commas outside parentheses: 'par(gdn,attn),gdn' -> ['par(gdn,attn)', 'gdn']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(pattern):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            raise ValueError(f"unbalanced ')' in layer pattern {pattern!r}")
        if ch == "," and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '(' in layer pattern {pattern!r}")
    return parts + [pattern[start:]]


def _branches(token: str) -> list[tuple[str, int]]:
    """'par(gdn*3,attn)' -> [('gdn', 3), ('attn', 1)] (branch name, head share); [] if not a par token."""
    if not token.startswith("par("):
        return []
    out = []
    for raw in _top_level(token[4:-1]):
        match = _TOKEN.match(raw.strip())
        if not match:
            raise ValueError(f"bad branch {raw.strip()!r} in {token!r}; expected 'name' or 'name*share', "
                             f"e.g. 'par(gdn*3,attn)'")
        share = int(match.group(2) or 1)
        if share < 1:
            raise ValueError(f"a branch's head share must be >= 1 in {token!r}")
        out.append((match.group(1), share))
    return out


def expand_pattern(pattern: str) -> list[str]:
    """'gdn*3,attn' -> ['gdn', 'gdn', 'gdn', 'attn']; 'par(gdn,attn)*2' -> ['par(gdn,attn)'] * 2."""
    out: list[str] = []
    for raw in _top_level(pattern):
        token = raw.strip()
        match = _TOKEN.match(token) or _PAR.match(token.replace(" ", ""))
        if not match:
            raise ValueError(f"bad layer pattern token {token!r} in {pattern!r}; expected 'name', 'name*count' or "
                             f"'par(name,name*share)' separated by commas, e.g. 'gdn*3,attn' or 'par(gdn,attn)'")
        count = int(match.group(2) or 1)
        if count < 1:
            raise ValueError(f"layer count must be >= 1 in {token!r}")
        out += [match.group(1)] * count
    return out


def _check_indices(field: str, indices: list[int], n: int) -> None:
    bad = [i for i in indices if not 0 <= i < n]
    if bad:
        raise ValueError(f"{field} {bad} out of range for {n} layers (0-indexed: 0..{n - 1})")
    if len(set(indices)) != len(indices):
        raise ValueError(f"{field} has duplicates: {indices}")
