"""Saved HybridConfigs of earlier layouts, converted when a model folder is loaded.

``AssocMemConfig`` passes the ``hybrid`` dict of every config it is built from (a config.json
written by ``save_pretrained``) through ``upgrade_hybrid``; a current dict passes unchanged. Only
loading converts: a HybridConfig built in code or from YAML takes the current layout alone.

The flat LayerOptions keys of the layout before its sub-models move into them, in every spec and
override (a flat key wins over the same key given nested):

    num_kv_heads, rope, rope_theta                     attention.num_kv_heads, .rope, .rope_theta
    qk_rmsnorm: true | false                           attention.qk_norm: rmsnorm | none
    sca_expand, sca_out_expand, sca_query_heads, sca_maxlen    sca.expand, .out_expand, .query_heads, .maxlen

The fields of the layout before block extensions (models/extensions.py) become extensions:

    foh_layers: {i: {mode, seq_len}}                   {kind: foh, layers: [i], mode, seq_len}
    steer: {i: {kind, cutoff, mode, seq_len}}          {kind: steer, layers: [i], band: kind, cutoff, mode, seq_len}
    block_norm: wiola                                  block_norm: rmsnorm, {kind: wiola_norm}
    mlp_kind: {kind: dsff, hidden_a, hidden_b}         mlp_kind: swiglu, {kind: dsff, hidden_a, hidden_b}
    a spec's layer.attention.{rope: {kind: srpe, ...}, output_gate, cross_layer, token_merge}
                                                       {kind: wiola_attention, layers: [the spec's layers],
                                                        srpe, output_gate, cross_layer, token_merge}

The converted config builds the same modules under the same parameter names, so the saved weights
load and give the same logits (tests/models/test_old_configs.py, folders saved by that layout).
"""
from __future__ import annotations

import copy
from typing import Any

from .config import expand_pattern

WIOLA_ATTENTION = ("output_gate", "cross_layer", "token_merge")  # with rope: {kind: srpe}, the old spec fields
# flat LayerOptions key -> (its sub-model, its key there, the value map)
FLAT_KEYS = {
    "num_kv_heads": ("attention", "num_kv_heads", None),
    "rope": ("attention", "rope", None),
    "rope_theta": ("attention", "rope_theta", None),
    "qk_rmsnorm": ("attention", "qk_norm", lambda on: "rmsnorm" if on else "none"),
    "sca_expand": ("sca", "expand", None),
    "sca_out_expand": ("sca", "out_expand", None),
    "sca_query_heads": ("sca", "query_heads", None),
    "sca_maxlen": ("sca", "maxlen", None),
}


def upgrade_hybrid(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a HybridConfig dict, maybe of an earlier layout) in the current layout (module docstring)."""
    data = copy.deepcopy(data)
    extensions = list(data.get("extensions") or [])
    if data.get("block_norm") == "wiola":
        data["block_norm"] = "rmsnorm"
        extensions.append({"kind": "wiola_norm"})
    if isinstance(data.get("mlp_kind"), dict):
        options = data["mlp_kind"]
        data["mlp_kind"] = "swiglu"
        extensions.append({**options, "kind": options.get("kind", "dsff")})
    for i, options in sorted((data.pop("foh_layers", None) or {}).items(), key=lambda kv: int(kv[0])):
        extensions.append({"kind": "foh", "layers": [int(i)], **options})
    for i, options in sorted((data.pop("steer", None) or {}).items(), key=lambda kv: int(kv[0])):
        options = dict(options)
        extensions.append({"kind": "steer", "layers": [int(i)], "band": options.pop("kind"), **options})
    for layer, _, _ in _layer_options(data):
        _nest_flat_keys(layer)
    extensions += _wiola_attention(data)
    if extensions:
        data["extensions"] = extensions
    return data


def _nest_flat_keys(layer: dict | None) -> None:
    """Move the FLAT_KEYS of a LayerOptions dict into their sub-models (in place)."""
    if not isinstance(layer, dict):
        return
    for key in [k for k in FLAT_KEYS if k in layer]:
        sub, new, convert = FLAT_KEYS[key]
        value = layer.pop(key)
        layer[sub] = {**(layer.get(sub) or {}), new: value if convert is None else convert(value)}


def _wiola_attention(data: dict) -> list[dict]:
    """Wiola's options taken out of every attention spec of ``data`` (edited in place), as wiola_attention
    extensions on the layers of each spec (one per distinct set of options)."""
    groups: dict[str, tuple[dict, list[int]]] = {}
    for layer, indices, where in _layer_options(data):
        attention = layer.get("attention") if isinstance(layer, dict) else None
        if not isinstance(attention, dict):
            continue
        options = {k: attention.pop(k) for k in WIOLA_ATTENTION if k in attention}
        if isinstance(attention.get("rope"), dict):
            options["srpe"] = {k: v for k, v in attention.pop("rope").items() if k != "kind"}
            attention["rope"] = True
        options = {k: v for k, v in options.items() if v not in (None, False)}
        if not options:
            continue
        if indices is None:
            raise ValueError(f"the saved config puts Wiola's attention options {sorted(options)} in {where}, which "
                             f"the current layout cannot express (a block extension applies to whole layers)")
        key = repr(sorted(options.items()))
        groups.setdefault(key, (options, []))[1].extend(indices)
    return [{"kind": "wiola_attention", "layers": sorted(set(indices)), **options}
            for options, indices in groups.values()]


def _layer_options(data: dict):
    """(LayerOptions dict, the 0-indexed layers it applies to or None, where it sits) for every spec of
    ``data``: the ``layers`` list's specs, the ``attention`` spec, ``overrides`` and parallel branches."""
    entries = _entries(data)
    layers = data.get("layers")
    if isinstance(layers, list):
        for j, entry in enumerate(layers):
            if isinstance(entry, dict):
                yield from _spec_options(entry, [i for i, (k, _) in enumerate(entries) if k == ("list", j)],
                                         f"layers[{j}]")
    attention = data.get("attention")
    if isinstance(attention, dict):
        yield from _spec_options(attention, [i for i, (k, _) in enumerate(entries) if k == ("attention",)],
                                 "attention")
    for name, update in (data.get("overrides") or {}).items():
        yield update, [i for i, (_, n) in enumerate(entries) if n == name], f"overrides[{name!r}]"


def _spec_options(spec: dict, indices: list[int], where: str):
    if "branches" in spec:
        for b, branch in enumerate(spec["branches"]):
            yield branch.get("layer"), None, f"{where}.branches[{b}]"
    else:
        yield spec.get("layer"), indices, where


def _entries(data: dict) -> list[tuple[tuple, str | None]]:
    """Per layer: where its entry comes from (("list", j), ("pattern",) or ("attention",)) and its layer
    name, after the pattern is repeated to n_layers and attention_layers placed (as HybridConfig does)."""
    layers = data.get("layers", "attn")
    base = ([(("list", j), e if isinstance(e, str) else None) for j, e in enumerate(layers)] if isinstance(layers, list)
            else [(("pattern",), name) for name in expand_pattern(layers)])
    n = data.get("n_layers") or len(base)
    entries = base * (n // max(len(base), 1))
    attention = data.get("attention", "attn")
    for i in data.get("attention_layers") or []:
        if 0 <= i < len(entries):
            entries[i] = (("attention",), attention if isinstance(attention, str) else None)
    return entries
