"""Supervised fine-tuning inputs: prompt/response files, verifiable-task data kinds, model.init_from."""
import json
import warnings

import pytest
import torch

from assocmem.training.config import ConfigError, ModelConfig, config_from_dict
from assocmem.training.data import ByteTokenizer, build_datasets
from assocmem.training.distributed import init_distributed, shutdown
from assocmem.training.loop import Trainer, train
from assocmem.training.model_factory import build_from_config, load_pretrained
from assocmem.training.runlog import check_run_dir
from training_helpers import BASE, TINY_LLAMA, merge

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [{"q": "1+1=", "a": "2"}, {"q": "two plus three is ", "a": "five"}, {"q": "x" * 30, "a": "y" * 10}]
HYBRID = {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}


def _pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in PAIRS))
    return str(path)


def _config(data, **top):
    """BASE with its data section replaced and other sections merged."""
    return config_from_dict({**merge(BASE, top), "data": data})


def _files_config(tmp_path, **data):
    return _config({"kind": "files", "train_files": [_pairs_file(tmp_path)], "prompt_field": "q",
                    "response_field": "a", **data})


def test_prompt_response_files_mask_the_prompt(tmp_path):
    cfg = _files_config(tmp_path, seq_len=48)
    rows, _, vocab = build_datasets(cfg.data)
    tok = ByteTokenizer()
    assert vocab == 257 and len(rows) == 3
    for row, pair in zip(rows, PAIRS):
        prompt, response = tok.encode(pair["q"]), tok.encode(pair["a"]) + [256]
        pad = 48 - len(prompt) - len(response)
        assert row["input_ids"] == prompt + response + [256] * pad      # padded with EOS (no pad id in bytes)
        assert row["labels"] == [-100] * len(prompt) + response + [-100] * pad


def test_overlong_records_are_refused_or_dropped(tmp_path):
    with pytest.raises(ValueError, match=r"1 of 3 prompt/response records are longer than seq_len=24 "
                                         r"\(longest 41 tokens\); raise data.seq_len or set data.overlong: drop"):
        build_datasets(_files_config(tmp_path, seq_len=24).data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, _, _ = build_datasets(_files_config(tmp_path, seq_len=24, overlong="drop").data)
    assert len(rows) == 2 and "dropped" in str(caught[0].message)


def test_prompt_and_response_fields_go_together(tmp_path):
    with pytest.raises(ConfigError, match="prompt_field and data.response_field go together"):
        _config({"kind": "files", "train_files": ["x.jsonl"], "prompt_field": "q"})
    with pytest.raises(ConfigError, match="text_field is for packed text"):
        _files_config(tmp_path, text_field="body")
    with pytest.raises(ValueError, match=r"prompt/response field \['b'\] is not a column"):
        build_datasets(_files_config(tmp_path, response_field="b").data)


def test_verifiable_data_kinds_build_rows():
    chain = _config({"kind": "chain_sum", "num_digits": 3, "num_train": 20, "num_eval": 5})
    train_ds, eval_ds, vocab = build_datasets(chain.data)
    assert (len(train_ds), len(eval_ds), vocab) == (20, 5, 14)
    modular = _config({"kind": "modular", "p": 7, "train_fraction": 0.5})
    train_ds, eval_ds, vocab = build_datasets(modular.data)
    assert (len(train_ds), len(eval_ds), vocab) == (24, 25, 8)
    assert not {tuple(r[:3]) for r in train_ds["input_ids"]} & {tuple(r[:3]) for r in eval_ds["input_ids"]}
    with pytest.raises(ConfigError, match="unknown key config.data.num_train"):
        _config({"kind": "modular", "num_train": 3})


# ---------------------------------------------------------------- init_from
def _saved(tmp_path, model_cfg, name="saved"):
    torch.manual_seed(1)
    net = build_from_config(ModelConfig.model_validate(model_cfg), vocab_size=14)
    net.save_pretrained(tmp_path / name)
    return net, tmp_path / name


@pytest.mark.parametrize("model_cfg", [{"hybrid": HYBRID}, {"hf_config": TINY_LLAMA}], ids=["assocmem", "llama"])
def test_init_from_loads_the_saved_weights(tmp_path, model_cfg):
    saved, folder = _saved(tmp_path, model_cfg)
    for cfg in ({**model_cfg, "init_from": str(folder)}, {"init_from": str(folder)}):
        torch.manual_seed(2)                                            # another init: must be overwritten
        net = build_from_config(ModelConfig.model_validate(cfg), vocab_size=14)
        for (name, a), (_, b) in zip(net.state_dict().items(), saved.state_dict().items()):
            torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


def test_init_from_names_the_mismatched_fields(tmp_path):
    _, folder = _saved(tmp_path, {"hybrid": HYBRID})
    other = {"hybrid": {**HYBRID, "layers": "gdn,gdn", "d_model": 64}, "init_from": str(folder)}
    with pytest.raises(ValueError, match=r"differing fields: .*model.d_model: config 64, init_from 32.*"
                                         r"model.layers\[1\].name: config .gated_deltanet., init_from .softmax.$"):
        build_from_config(ModelConfig.model_validate(other), vocab_size=14)
    with pytest.raises(ValueError, match="model_type: config 'llama', init_from 'assocmem'"):
        build_from_config(ModelConfig.model_validate({"hf_config": TINY_LLAMA, "init_from": str(folder)}), vocab_size=14)
    _, llama = _saved(tmp_path, {"hf_config": TINY_LLAMA}, "llama")
    deeper = {"hf_config": {**TINY_LLAMA, "num_hidden_layers": 3}, "init_from": str(llama)}
    with pytest.raises(ValueError, match="model.hf_config.num_hidden_layers: config 3, init_from 2"):
        build_from_config(ModelConfig.model_validate(deeper), vocab_size=14)
    same = {"hybrid": {**HYBRID, "layers": ["gdn", "attn"], "form": "recurrent"}, "init_from": str(folder)}
    build_from_config(ModelConfig.model_validate(same), vocab_size=14)   # another spelling, another form: fine
    with pytest.raises(ValueError, match="smaller than the data's vocabulary 300"):
        build_from_config(ModelConfig.model_validate({"init_from": str(folder)}), vocab_size=300)


def test_init_from_refuses_what_does_not_load(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a saved model: no config.json"):
        load_pretrained(tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "assocmem", "hybrid": {"d_model": -1}}')
    with pytest.raises(ValueError, match="does not load"):
        load_pretrained(tmp_path / "broken")
    with pytest.raises(ConfigError, match="exactly one of preset, hybrid, hf_config"):
        config_from_dict(merge(BASE, {"model": {"hf_config": None}}))


def test_a_run_starts_from_init_from_and_a_run_folder_is_accepted(tmp_path):
    data = {"kind": "chain_sum", "num_digits": 3, "num_train": 64, "num_eval": 8}
    first = _config(data, name="pre", output_dir=str(tmp_path / "runs"), model={"hf_config": None, "hybrid": HYBRID})
    train(first)
    run = tmp_path / "runs" / "pre"
    second = _config(data, name="sft", output_dir=str(tmp_path / "runs"),
                     model={"hf_config": None, "init_from": str(run)})
    info = init_distributed("cpu")
    try:
        trainer = Trainer(second, info, check_run_dir(second, resume=False, overwrite=False), resume=False,
                          overwrite=False)
    finally:
        shutdown()
    finished = load_pretrained(run)
    for (name, a), (_, b) in zip(trainer.model.state_dict().items(), finished.state_dict().items()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)
