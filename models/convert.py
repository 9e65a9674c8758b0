"""A transformers Llama / Qwen2 / Qwen3 causal LM as an assocmem model, weight for weight.

    model = from_hf_causal_lm("path/to/llama")                        # identity: the same logits
    model = from_hf_causal_lm(teacher, replace=[1, 3], student="gdn")  # layers 1 and 3 become Gated DeltaNet

Both are ``AssocMemForCausalLM`` with the teacher's dtype. The published decoder layer

    h = x + Attention(RMSNorm(x)),    y = h + MLP(RMSNorm(h)),    MLP = W_down (SiLU(x W_gate) ⊙ x W_up)

is our ``Block`` (models/blocks.py), so every tensor is copied under a fixed name map:

    teacher                                   assocmem
    model.embed_tokens                        model.embed_tokens
    model.layers.i.input_layernorm            model.layers.i.mixer_norm
    model.layers.i.self_attn.*                model.layers.i.mixer.*       (mixers/convert/attention.py)
    model.layers.i.post_attention_layernorm   model.layers.i.mlp_norm
    model.layers.i.mlp.{gate,up,down}_proj    model.layers.i.mlp.{gate,up,down}_proj
    model.norm, lm_head                       model.norm, lm_head          (lm_head tied when the teacher's is)

Replaced layers (stage 1 of cross-architecture distillation, thesis §3.4, following "Mamba in the
Llama" and LoLCATs): the student mixer takes the teacher's W_q, W_k, W_v (the kv heads repeated for
the H query heads when the teacher uses GQA) and W_o; its gates, conv and output norm keep their fresh
initialisation, or the conv is the identity tap (``identity_conv=True``: only the tap on z_t is 1,
so the conv passes its input through its SiLU). The teacher's QK-norm weights (Qwen3) have no place
in the student and are not transferred. With ``replace=[]`` the model computes exactly the teacher's
function (tests/models/test_convert.py: logits float32 ≤ 1e-5, float64 ≤ 1e-10, greedy ``generate``).

A transformers ``MambaForCausalLM`` (Gu & Dao 2023; a loaded model or a folder) is converted by
``from_hf_mamba``: its block h = x + Mixer(RMSNorm(x)) is ours without an MLP, and its tensors map as

    backbone.embeddings          model.embed_tokens
    backbone.layers.i.norm       model.layers.i.mixer_norm
    backbone.layers.i.mixer.*    model.layers.i.mixer.*       (mixers/convert/mamba.py)
    backbone.norm_f, lm_head     model.norm, lm_head          (lm_head tied when the source's is)
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn

from assocmem.memories import NonParametric, Spectral
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.convert import CONVERTERS, spec_from_hf

from .config import HybridConfig
from .presets import build_model

SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")

# Thesis Table 3.3: the layers (0-indexed) replaced in the 16-layer Llama-3.2-1B teacher. "100" keeps
# layer 0 as attention (15 of 16 layers replaced), as the table lists it.
TABLE_3_3: dict[str, tuple[int, ...]] = {
    "none": (),
    "25": (3, 7, 11, 15),
    "50": (1, 3, 5, 7, 9, 11, 13, 15),
    "75": (1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15),
    "87_5": (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15),
    "100": tuple(range(1, 16)),
}
TABLE_3_3_LAYERS = 16


def table_3_3(name: str, num_layers: int) -> list[int]:
    """The replaced layers of Table 3.3's row ``name`` (25, 50, 75, 87_5, 100, none) for a 16-layer teacher."""
    if name not in TABLE_3_3:
        raise ValueError(f"unknown Table 3.3 set {name!r}; choices: {', '.join(TABLE_3_3)}")
    if num_layers != TABLE_3_3_LAYERS:
        raise ValueError(f"the Table 3.3 set {name!r} is for a {TABLE_3_3_LAYERS}-layer teacher, this one has "
                         f"{num_layers}; use replace_fraction (the same spacing at any depth) or an explicit replace")
    return list(TABLE_3_3[name])


def replace_fraction(fraction: float, num_layers: int) -> list[int]:
    """k = round(fraction · n) evenly spaced layers to replace, spaced as Table 3.3 spaces them.

    k ≤ n/2: the replaced layers are evenly spaced ending at the last layer, n−1 − round(j·n/k) for j < k;
    k > n/2: the n−k kept attention layers are evenly spaced starting at layer 0, round(i·n/(n−k)).
    At n = 16 this gives Table 3.3's rows 25, 50, 75 and 87_5
    (tests/models/test_convert.py::test_replace_fraction_gives_the_rows_of_table_3_3);
    fraction 1 replaces every layer (the table's "100" keeps layer 0: use ``table_3_3("100", 16)``).
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"replace_fraction must be in [0, 1], got {fraction}")
    k = round(fraction * num_layers)
    if 2 * k <= num_layers:
        return sorted(num_layers - 1 - round(j * num_layers / k) for j in range(k))
    kept = {round(i * num_layers / (num_layers - k)) for i in range(num_layers - k)}
    return [i for i in range(num_layers) if i not in kept]


def check_teacher_config(config, replace: Sequence[int]) -> None:
    """Refuse, from its config alone (before any weight is read), a teacher the student cannot take.

    Names the field: the architecture, rope scaling (``rope_scaling`` / ``rope_parameters.rope_type``),
    the activation, MLP or attention biases of replaced layers, and ``replace`` indices out of range.
    """
    arch = list(getattr(config, "architectures", None) or [])
    if not arch or arch[0] not in SUPPORTED:
        raise ValueError(f"teacher architectures = {arch}: cannot convert; supported teachers: {', '.join(SUPPORTED)}")
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ValueError(f"teacher rope_scaling: rope_type = {kind!r} is not supported (the student's RoPE is "
                         f"unscaled); supported: 'default'")
    _require(config, "hidden_act", {"silu"})
    _require(config, "mlp_bias", {False, None})
    check_replace(replace, config.num_hidden_layers)
    biased = bool(getattr(config, "attention_bias", False)) or type(config).__name__ == "Qwen2Config"  # Qwen2: always
    if replace and biased:
        raise ValueError(f"teacher {type(config).__name__} has q/k/v biases (attention_bias), which a replaced "
                         f"layer's mixer cannot hold; replace layers of a teacher without attention biases")


def from_hf_causal_lm(source: "str | Path | nn.Module", *, replace: Sequence[int] = (),
                      student: MixerSpec | str = "gated_deltanet", identity_conv: bool = False) -> nn.Module:
    """An ``AssocMemForCausalLM`` from a transformers causal LM (a loaded model or a local folder).

    replace: 0-indexed layers whose attention becomes ``student`` (a preset name or a MixerSpec; its
    heads and widths are set from the teacher's attention). Empty: the identity conversion.
    """
    teacher = _load(source)
    layers = teacher.model.layers
    replaced = check_replace(replace, len(layers))
    specs = [student_spec(student, layer.self_attn) if i in replaced else spec_from_hf(layer.self_attn)[0]
             for i, layer in enumerate(layers)]
    hc = hybrid_config(teacher.config, specs)
    weight = teacher.model.embed_tokens.weight
    model = build_model(hc).to(dtype=weight.dtype, device=weight.device)
    _copy_tokens(teacher.config, model.config)
    with torch.no_grad():
        model.load_state_dict(_state(teacher, model, replaced, identity_conv), strict=True)
    return model.train(teacher.training)


def from_hf_mamba(source: "str | Path | nn.Module") -> nn.Module:
    """An ``AssocMemForCausalLM`` computing what a transformers ``MambaForCausalLM`` (a loaded model or a local
    folder) computes: every layer the ``mamba`` preset at the source's widths, no MLP, the same tensors."""
    mamba = _load(source, ("MambaForCausalLM",))
    cfg, layers = mamba.config, mamba.backbone.layers
    if getattr(cfg, "residual_in_fp32", False) and mamba.backbone.embeddings.weight.dtype not in (torch.float32,
                                                                                                 torch.float64):
        raise ValueError("MambaForCausalLM.config.residual_in_fp32 with a half-precision model keeps a float32 "
                         "residual the assocmem blocks do not; convert the model in float32 or float64")
    specs = [spec_from_hf(layer.mixer)[0] for layer in layers]
    hc = HybridConfig(d_model=cfg.hidden_size, vocab_size=cfg.vocab_size, layers=specs, mlp_layers=[],
                      tie_embeddings=bool(cfg.tie_word_embeddings), norm_eps=cfg.layer_norm_epsilon)
    weight = mamba.backbone.embeddings.weight
    model = build_model(hc).to(dtype=weight.dtype, device=weight.device)
    _copy_tokens(cfg, model.config)
    src, out = mamba.state_dict(), dict(model.state_dict())
    out["model.embed_tokens.weight"] = src["backbone.embeddings.weight"]
    out["model.norm.weight"] = src["backbone.norm_f.weight"]
    out["lm_head.weight"] = src.get("lm_head.weight", src["backbone.embeddings.weight"])
    for i, (layer, ours) in enumerate(zip(layers, model.model.layers)):
        t = f"backbone.layers.{i}."
        out[f"model.layers.{i}.mixer_norm.weight"] = src[t + "norm.weight"]
        mixer = {k[len(t + "mixer."):]: v for k, v in src.items() if k.startswith(t + "mixer.")}
        out.update({f"model.layers.{i}.mixer.{k}": v for k, v in CONVERTERS["MambaMixer"].to_ours(mixer, ours.mixer.spec).items()})
    with torch.no_grad():
        model.load_state_dict(out, strict=True)
    return model.train(mamba.training)


def hybrid_config(config, specs: list[MixerSpec]) -> HybridConfig:
    """The HybridConfig of a Llama / Qwen2 / Qwen3 config with one spec per layer; refuses what differs."""
    _require(config, "hidden_act", {"silu"})
    _require(config, "mlp_bias", {False, None})
    return HybridConfig(d_model=config.hidden_size, vocab_size=config.vocab_size, layers=specs,
                        mlp_hidden=config.intermediate_size, mlp_layers="all",
                        tie_embeddings=bool(config.tie_word_embeddings), norm_eps=config.rms_norm_eps)


def student_spec(student: MixerSpec | str, attention: nn.Module) -> MixerSpec:
    """``student`` with the heads and widths of the teacher attention (H heads of width D, V = D)."""
    spec = get_preset(student) if isinstance(student, str) else student
    if isinstance(spec.memory, (NonParametric, Spectral)):
        raise ValueError(f"student {spec.name!r} ({spec.memory.kind} memory) cannot take the teacher's q/k/v/o: a "
                         f"replaced layer needs a parametric-memory mixer (gated_deltanet, mamba2, gla, ...)")
    if attention.q_proj.bias is not None:
        raise ValueError(f"layer {attention.layer_idx}: the teacher attention has q/k/v biases, which the student "
                         f"mixer ({spec.name}) cannot hold; replace layers of a teacher without attention biases")
    data = spec.model_dump()
    data["layer"].update(num_heads=attention.config.num_attention_heads, head_dim=attention.head_dim,
                         expand_v=1.0, num_qk_heads=None)
    return MixerSpec.model_validate(data)


def _load(source, supported: tuple[str, ...] = SUPPORTED) -> nn.Module:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a transformers model folder (no config.json)")
        from .hf_load import load_causal_lm

        source = load_causal_lm(path)
    name = type(source).__name__
    if name not in supported:
        raise ValueError(f"cannot convert a {name}; supported: {', '.join(supported)}")
    return source


def check_replace(replace: Sequence[int], n: int) -> set[int]:
    """The replaced layers as a set; refuses indices out of range for ``n`` layers and duplicates."""
    bad = [i for i in replace if not 0 <= i < n]
    if bad:
        raise ValueError(f"replace {bad} out of range for a teacher with {n} layers (0-indexed: 0..{n - 1})")
    if len(set(replace)) != len(replace):
        raise ValueError(f"replace has duplicates: {list(replace)}")
    return set(replace)


def _require(config, attr: str, allowed: set) -> None:
    value = getattr(config, attr, None)
    if value not in allowed:
        raise ValueError(f"{type(config).__name__}.{attr} = {value!r} is not supported; supported: "
                         f"{', '.join(sorted(map(repr, allowed)))}")


def _copy_tokens(src, dst) -> None:
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(dst, name, getattr(src, name, None))


def _state(teacher: nn.Module, model: nn.Module, replaced: set[int], identity_conv: bool) -> dict:
    """The student's full state dict: the teacher's tensors under our names, fresh ones where none map."""
    src, out = teacher.state_dict(), dict(model.state_dict())
    out["model.embed_tokens.weight"] = src["model.embed_tokens.weight"]
    out["model.norm.weight"] = src["model.norm.weight"]
    out["lm_head.weight"] = src["lm_head.weight"] if "lm_head.weight" in src else src["model.embed_tokens.weight"]
    for i, layer in enumerate(model.model.layers):
        t, s = f"model.layers.{i}.", f"model.layers.{i}."
        out[s + "mixer_norm.weight"] = src[t + "input_layernorm.weight"]
        out[s + "mlp_norm.weight"] = src[t + "post_attention_layernorm.weight"]
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out[s + f"mlp.{proj}.weight"] = src[t + f"mlp.{proj}.weight"]
        attn = {k[len(t + "self_attn."):]: v for k, v in src.items() if k.startswith(t + "self_attn.")}
        if i in replaced:
            mixer = transfer_attention(attn, teacher.model.layers[i].self_attn, layer.mixer, identity_conv)
        else:
            conv = CONVERTERS[type(teacher.model.layers[i].self_attn).__name__]
            mixer = conv.to_ours(attn, layer.mixer.spec)
        out.update({s + "mixer." + k: v for k, v in mixer.items()})
    return out


def transfer_attention(attn: dict, attention: nn.Module, mixer: nn.Module, identity_conv: bool) -> dict:
    """A replaced layer's state: W_q, W_k, W_v (kv heads repeated to H) into qkv_proj, W_o into o_proj,
    the rest as the student initialised it (the conv optionally the identity tap)."""
    state = dict(mixer.state_dict())
    rep = attention.config.num_attention_heads // attention.config.num_key_value_heads
    D, d = attention.head_dim, attn["q_proj.weight"].shape[1]
    heads = lambda w: w.view(-1, D, d).repeat_interleave(rep, dim=0).reshape(-1, d)  # noqa: E731  kv -> H heads
    state["qkv_proj.weight"] = torch.cat([attn["q_proj.weight"], heads(attn["k_proj.weight"]),
                                          heads(attn["v_proj.weight"])])
    state["o_proj.weight"] = attn["o_proj.weight"]
    if identity_conv and "conv.weight" in state:
        taps = torch.zeros_like(state["conv.weight"])
        taps[..., -1] = 1.0  # the last tap multiplies z_t (mixers/conv.py)
        state["conv.weight"] = taps
    return state
