"""The block extension slot: one registry of kinds, one config field, one hook per block and kind."""
from typing import ClassVar, Literal

import pytest
import torch

from assocmem.mixers.wiola import WiolaAttention, WiolaRMSNorm
from assocmem.models import HybridConfig, build_model
from assocmem.models.extensions import EXTENSIONS, Extension, ExtensionRegistry

FOH = {"kind": "foh", "mode": "causal", "seq_len": 8}


def _hybrid(extensions, layers="attn,gdn") -> HybridConfig:
    return HybridConfig(d_model=16, vocab_size=32, layers=layers, num_heads=2, mlp_ratio=2, extensions=extensions)


def test_the_registered_kinds():
    assert EXTENSIONS.names() == ["dsff", "foh", "steer", "wiola_attention", "wiola_norm"]


def test_a_registry_refuses_a_second_kind_of_the_same_name_and_names_the_kinds_on_a_miss():
    registry = ExtensionRegistry()

    class Mine(Extension):
        kind: Literal["mine"] = "mine"

    registry.register(Mine)
    with pytest.raises(ValueError, match="'mine' is already registered"):
        registry.register(Mine)
    with pytest.raises(ValueError, match=r"unknown extension kind 'yours'; registered kinds: \['mine'\]"):
        registry["yours"]

    class Bad(Extension):
        kind: Literal["bad"] = "bad"
        hooks: ClassVar[tuple[str, ...]] = ("attention",)

    with pytest.raises(ValueError, match=r"hooks names \['attention'\]; the hooks are"):
        registry.register(Bad)

    class NoMethod(Extension):
        kind: Literal["nomethod"] = "nomethod"
        hooks: ClassVar[tuple[str, ...]] = ("mlp",)

    with pytest.raises(ValueError, match=r"hooks names \['mlp'\] but the class defines no such method"):
        registry.register(NoMethod)


def test_an_unknown_kind_in_a_config_lists_the_kinds():
    with pytest.raises(ValueError, match=r"unknown extension kind 'fho'; registered kinds: \['dsff', 'foh'"):
        _hybrid([{**FOH, "kind": "fho"}])


def test_each_layer_gets_its_extensions_and_every_block_the_unrestricted_ones():
    hc = _hybrid([{**FOH, "layers": [1]}, {"kind": "wiola_norm"}])
    assert [[e.kind for e in layer.extensions] for layer in hc.plan] == [["wiola_norm"], ["foh", "wiola_norm"]]
    model = build_model(hc)
    assert type(model.model.layers[1].mixer).__name__ == "FourierOnlyAttention"
    norms = [m for m in model.modules() if isinstance(m, WiolaRMSNorm)]
    assert len(norms) == 2 * 2 + 1  # two pre-norms per block and the final norm


def test_two_extensions_on_one_hook_of_a_layer_are_refused_naming_both():
    with pytest.raises(ValueError, match="layer 0: the extensions 'foh' and 'wiola_attention' both provide its mixer"):
        _hybrid([{**FOH, "layers": [0]}, {"kind": "wiola_attention", "output_gate": True}], layers="attn")


def test_wiola_attention_applies_to_attention_layers_only():
    with pytest.raises(ValueError, match="wiola_attention applies to softmax-attention layers; layer 1 is"):
        _hybrid([{"kind": "wiola_attention", "output_gate": True}])
    model = build_model(_hybrid([{"kind": "wiola_attention", "layers": [0], "output_gate": True}]))
    assert isinstance(model.model.layers[0].mixer, WiolaAttention)


def test_an_extension_mlp_gives_a_block_an_mlp_even_without_a_width():
    hc = HybridConfig(d_model=16, vocab_size=32, layers="attn", num_heads=2, mlp_ratio=0,
                      extensions=[{"kind": "dsff", "hidden_a": 8, "hidden_b": 24, "layers": [0]}], n_layers=2)
    assert hc.mlp_flags() == [True, False]
    model = build_model(hc)
    assert type(model.model.layers[0].mlp).__name__ == "DSFF" and model.model.layers[1].mlp is None
    assert model(torch.randint(0, 32, (1, 5))).logits.shape == (1, 5, 32)
