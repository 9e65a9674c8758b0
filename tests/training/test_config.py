"""TrainConfig: YAML in/out, unknown keys rejected with the allowed ones listed, --set overrides."""
import pytest
import yaml

from assocmem.training.config import ConfigError, TrainConfig, apply_overrides, config_from_dict, load_config

from training_helpers import BASE, merge


def test_load_config_defaults_name_to_file_stem_and_round_trips(write_config):
    cfg = load_config(write_config("my-run"))
    assert cfg.name == "my-run" and cfg.data.kind == "mqar" and cfg.train.steps == 12
    again = config_from_dict(yaml.safe_load(cfg.to_yaml()))
    assert again == cfg


@pytest.mark.parametrize("update,where,allowed", [
    ({"colour": 1}, "config.colour", "name, output_dir, seed, model, data, optim, train"),
    ({"optim": {"learning_rate": 1}}, "config.optim.learning_rate",
     "lr, weight_decay, betas, eps, warmup_steps, min_lr_ratio, schedule, grad_clip"),
    ({"data": {"num_pairs": 3}}, "config.data.num_pairs", "num_kv_pairs"),
    ({"model": {"hf_config": None, "hybrid": {"d_model": 32, "layer": "gdn"}}}, "config.model.hybrid.layer",
     "d_model, vocab_size, layers"),
])
def test_unknown_keys_are_rejected_with_the_allowed_list(update, where, allowed):
    with pytest.raises(ConfigError) as err:
        config_from_dict(merge(BASE, update))
    assert f"unknown key {where}" in str(err.value) and allowed in str(err.value)


def test_unknown_data_kind_lists_the_kinds():
    with pytest.raises(ConfigError, match=r"data.kind must be one of \['mqar', 'graph_walk', 'selective_copy', "
                                          r"'chain_sum', 'graph_path', 'modular', 'needle', 'files', 'problems', "
                                          r"'mixture'\]"):
        config_from_dict(merge(BASE, {"data": {"kind": "copy"}}))


@pytest.mark.parametrize("update,match", [
    ({"model": {"preset": "thesis-tiny-gdn-75"}}, "exactly one of preset, hybrid, hf_config"),
    ({"train": {"epochs": 2}}, "exactly one of steps, epochs"),
    ({"train": {"batch_size": 0}}, "train.batch_size: Input should be greater than 0"),
    ({"data": {"eval_seed": 0}}, "must differ"),
])
def test_invalid_values_name_the_field(update, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict(merge(BASE, update))


def test_set_overrides_coerce_to_the_field_types():
    raw = apply_overrides(BASE, ["optim.lr=1e-3", "name=123", "optim.betas=[0.9, 0.99]", "optim.grad_clip=null",
                                 "train.precision=bf16", "data.num_kv_pairs=8", "train.deterministic=false"])
    cfg = config_from_dict(raw)
    assert cfg.optim.lr == 1e-3 and cfg.name == "123" and cfg.optim.betas == (0.9, 0.99)
    assert cfg.optim.grad_clip is None and cfg.train.precision == "bf16" and cfg.data.num_kv_pairs == 8
    assert cfg.train.deterministic is False
    assert BASE["optim"]["lr"] == 3e-3  # the input is not modified


def test_set_reaches_into_a_hybrid_and_creates_sections():
    raw = apply_overrides(merge(BASE, {"model": {"hf_config": None}}),
                          ["model.hf_config=null", "model.hybrid.d_model=32", "model.hybrid.layers=gdn,attn",
                           "model.hybrid.mlp_ratio=0"])
    cfg = config_from_dict(raw)
    assert cfg.model.hybrid == {"d_model": 32, "layers": "gdn,attn", "mlp_ratio": 0}


@pytest.mark.parametrize("item,match", [
    ("optim.lrate=1", "unknown key config.optim.lrate; allowed keys in OptimConfig: lr, weight_decay"),
    ("trainer.steps=3", "unknown key config.trainer; allowed keys in TrainConfig"),
    ("optim.lr", "expects key=value"),
])
def test_bad_set_overrides(item, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(BASE, [item])


def test_load_config_applies_overrides(write_config):
    cfg = load_config(write_config("x"), ["train.steps=3"])
    assert cfg.train.steps == 3 and isinstance(cfg, TrainConfig)


def test_read_config_mapping_applies_overrides_and_names_the_problem(tmp_path):
    """The reader of the distill and rl configs: YAML values, null sections filled, name from the stem;
    a path through a value, an empty key and an override without '=' are refused by name."""
    from assocmem.training.config_files import read_config_mapping

    path = tmp_path / "exp.yaml"
    path.write_text("loss: null\ntrain: {steps: 3}\n")
    data = read_config_mapping(path, ["loss.beta=0.04", "train.lrs=[1, 2]", "name=run"], example="loss.beta=0.04")
    assert data == {"loss": {"beta": 0.04}, "train": {"steps": 3, "lrs": [1, 2]}, "name": "run"}
    assert read_config_mapping(path, [], example="x=1")["name"] == "exp"
    with pytest.raises(ConfigError, match=r"--set train.steps.x: train.steps is 3, not a section, so it has no key 'x'"):
        read_config_mapping(path, ["train.steps.x=1"], example="x=1")
    with pytest.raises(ConfigError, match="empty key"):
        read_config_mapping(path, ["=1"], example="x=1")
    with pytest.raises(ConfigError, match=r"key=value \(e.g. loss.beta=0.04\)"):
        read_config_mapping(path, ["loss.beta"], example="loss.beta=0.04")
    with pytest.raises(ConfigError, match="config file not found"):
        read_config_mapping(tmp_path / "missing.yaml", [], example="x=1")


CUSTOM = {"name": "lp_mine", "memory": {"kind": "matrix"}, "bias": {"kind": "lp", "p": 3.0, "clip": 0.5},
          "retention": {"kind": "l2_decay", "gate": "key"}, "optimizer": {"kind": "momentum"},
          "layer": {"num_heads": 2, "head_dim": 8}}


def _with_layers(layers):
    return merge(BASE, {"model": {"hf_config": None, "hybrid": {"d_model": 32, "layers": layers}}})


def test_set_reaches_list_entries_by_index():
    """``key[i]`` is entry i of a list: a custom spec inside the hybrid's layers is swept from the command line."""
    raw = apply_overrides(_with_layers([CUSTOM, "attn"]), ["model.hybrid.layers[0].bias.p=4",
                                                           "model.hybrid.layers[1]=swa", "optim.betas=[0.9, 0.98]",
                                                           "optim.betas[1]=0.95"])
    cfg = config_from_dict(raw)
    first, second = cfg.model.hybrid["layers"]
    assert first["bias"] == {"kind": "lp", "p": 4, "clip": 0.5} and second == "swa" and cfg.optim.betas == (0.9, 0.95)
    assert CUSTOM["bias"]["p"] == 3.0  # the input is not modified


@pytest.mark.parametrize("item,match", [
    ("model.hybrid.layers[2].bias.p=3", r"model.hybrid.layers\[2\].bias.p: index \[2\] is out of range: "
                                        r"model.hybrid.layers has 2 entries \(indices 0..1\)"),
    ("model.hybrid.layers[1].bias.p=3", r"model.hybrid.layers\[1\] is 'attn', not a section, so it has no key 'bias'"),
    ("model.hybrid.layers[x].bias.p=3", r"'layers\[x\]' is not a key or key\[index\] \(an index is an integer ≥ 0"),
    ("model.hybrid.layers[-1]=gdn", r"'layers\[-1\]' is not a key or key\[index\]"),
    ("optim.lr[0]=1", r"optim.lr\[0\]: optim.lr is a float, not a list, so it has no entry \[0\]"),
])
def test_a_bad_index_names_the_path_that_failed(item, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(_with_layers([CUSTOM, "attn"]), [item])


def test_an_index_into_a_layer_pattern_says_to_write_a_list():
    with pytest.raises(ConfigError, match=r"model.hybrid.layers is the string 'gdn,attn', not a list, so it has no "
                                          r"entry \[0\] \(write the layers as a YAML list"):
        apply_overrides(_with_layers("gdn,attn"), ["model.hybrid.layers[0].bias.p=3"])
