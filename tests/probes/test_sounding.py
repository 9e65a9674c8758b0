"""The sounding hammer (seed 003 §4.4, eq. 5): ρ of mean gradients, on any HF causal LM."""
import json
import math
import re

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

from assocmem.probes.sounding import mean_gradient, select_parameters, sound, sounding_hammer
from assocmem.cli import main as cli_main
from assocmem.training.fourier import FOURIER_POWERS, mode_power
from assocmem.training.tasks import mqar_dataset

TINY_LLAMA = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _llama():
    torch.manual_seed(0)
    cfg = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    return LlamaForCausalLM(LlamaConfig(vocab_size=32, **cfg)).eval()


def _data(n=12):
    return mqar_dataset(n, 16, 2, vocab_size=32, seed=0)


def test_a_pure_cosine_gradient_has_rho_one_and_white_noise_scores_its_flat_value():
    t = torch.arange(64, dtype=torch.float64)
    cosine = torch.cos(2 * math.pi * 9 * t / 64)[:, None] * torch.randn(1, 5, dtype=torch.float64)
    r = sound("w", cosine, axis=0, length=None, top_k=4)
    assert r.rho == pytest.approx(1.0, abs=1e-12) and r.dominant_mode == 9 and 9 in r.top_modes
    white = torch.randn(512, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    each = sound("w", white, axis=0, length=None, top_k=16, fourier_power="sum_of_powers")
    summed = sound("w", white, axis=0, length=None, top_k=16)
    # summing the powers of many independent columns averages the spectrum: the top-K share tends to K / bins
    # (0.062); the gradient summed over its columns is one white signal, which scores the order-statistics
    # value rho_flat (0.23) on average
    assert 16 / 257 < each.rho < 1.3 * 16 / 257 < summed.rho_flat
    assert abs(summed.rho - summed.rho_flat) < 0.05 and summed.fourier_power == "power_of_sum"
    torch.testing.assert_close(torch.tensor(summed.power, dtype=torch.float64), mode_power(white.sum(1, keepdim=True)),
                               rtol=1e-12, atol=0)


def test_mean_gradient_is_the_gradient_of_the_mean_loss_over_all_supervised_positions():
    """Batches of 5 accumulate to ∇ of transformers' own full-batch loss (mean over supervised tokens)."""
    model, data = _llama(), _data()
    params = select_parameters(model, ["model.embed_tokens.weight", "lm_head.weight"])
    ours = mean_gradient(model, data, batch_size=5, params=params)
    ids = torch.tensor(data["input_ids"])
    labels = torch.tensor(data["labels"])
    model.zero_grad()
    model(input_ids=ids, labels=labels).loss.backward()
    for name, p in params.items():
        torch.testing.assert_close(ours[name], p.grad, atol=1e-7, rtol=1e-5)
        assert ours[name].abs().max() > 0


def test_sounding_hammer_on_a_transformers_model_matches_sound_on_its_gradient():
    model, data = _llama(), _data()
    results = sounding_hammer(model, data, params=["model.embed_tokens.weight", "model.layers.*.mlp.*"],
                              axis=0, top_k=4, batch_size=4)
    assert [r.param for r in results] == ["model.embed_tokens.weight", "model.layers.0.mlp.gate_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"]
    grads = mean_gradient(model, data, batch_size=12, params=select_parameters(model, ["model.embed_tokens.weight"]))
    direct = sound("model.embed_tokens.weight", grads["model.embed_tokens.weight"], axis=0, length=None, top_k=4)
    assert results[0].rho == pytest.approx(direct.rho, rel=1e-5)
    assert results[0].length == 32 and len(results[0].power) == 17


def test_bad_requests_name_what_is_wrong():
    model, data = _llama(), _data(4)
    with pytest.raises(ValueError, match=r"\['wpe\.\*'\] match no trainable parameter.*model.embed_tokens.weight"):
        sounding_hammer(model, data, params=["wpe.*"])
    with pytest.raises(ValueError, match="does not fit"):
        sounding_hammer(model, data, params=["model.norm.weight"], axis=1)
    with pytest.raises(ValueError, match=r"--top-k 40 must lie in \[1, 17\]"):
        sounding_hammer(model, data, params=["model.embed_tokens.weight"], top_k=40)


def test_cli_sounds_an_untrained_config_on_its_data(tmp_path, capsys):
    cfg = {"name": "s", "seed": 3, "model": {"hf_config": TINY_LLAMA},
           "data": {"kind": "mqar", "seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32, "num_train": 24},
           "train": {"steps": 1}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code = cli_main(["probe", "sounding", str(path), "--params", "model.embed_tokens.weight", "--top-k", "3",
                     "--length", "30", "--out", str(out)])
    assert code == 0
    err = capsys.readouterr().err  # progress: each gradient batch (24 sequences in one batch of the default 32)
    assert re.fullmatch(r"sounding \([0-9.]+ s\) gradient batch 1/1 \.\.\.\n", err)
    report = json.loads((out / "sounding.json").read_text())
    (r,) = report["soundings"]
    assert r["length"] == 30 and len(r["power"]) == 16 and 0 < r["rho"] <= 1 and report["trained"] is False
    assert report["steer"] == ([r["param"]] if r["rho"] > 0.6 else [])
    assert report["fourier_power"] == r["fourier_power"] == "power_of_sum"
    assert (out / "sounding.png").stat().st_size > 0
    assert cli_main(["probe", "sounding", str(path), "--out", str(out)]) == 2          # refuses a non-empty --out


def test_cli_needs_data_for_a_model_without_its_own(tmp_path, capsys):
    assert cli_main(["probe", "sounding", "thesis-tiny-transformer", "--out", str(tmp_path / "o")]) == 2
    assert "pass --data" in capsys.readouterr().err


def test_the_cli_offers_the_library_readings_of_eq_5():
    import argparse

    from assocmem.cli.probe import _sounding_parser

    parser = _sounding_parser(argparse.ArgumentParser().add_subparsers())
    action = next(a for a in parser._actions if a.dest == "fourier_power")
    assert tuple(action.choices) == FOURIER_POWERS and action.default == "power_of_sum"
