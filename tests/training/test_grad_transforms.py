"""train.grad_transforms: FGP / PFFT / adaptive FGP (seed 003 §4) and GrokFast-EMA, their config,
their place in the step, and their state in checkpoints (bitwise resume)."""
import math
import shutil
from typing import Dict, Optional

import pytest
import torch
import torch.nn as nn
import yaml
from safetensors.torch import load_file

from assocmem.training.checkpoint import STATE_FILE, list_checkpoints, seal_checkpoint
from assocmem.training.config import ConfigError, config_from_dict, load_config
from assocmem.training.fourier import project_modes
from assocmem.training.grad_transforms import (GrokfastEMA, GrokfastEMAConfig, GradTransforms,
                                               prescription_modes)
from assocmem.training.loop import train
from training_helpers import BASE, merge


# ---------------------------------------------------------------- GrokFast-EMA oracle
def gradfilter_ema(m: nn.Module, grads: Optional[Dict[str, torch.Tensor]] = None, alpha: float = 0.98,
                   lamb: float = 2.0) -> Dict[str, torch.Tensor]:
    """The formula of ``gradfilter_ema`` in ironjr/grokfast (grokfast.py; Lee et al. 2024, Algorithm 1),
    ported: μ starts at the first gradient; μ ← μ·α + g·(1 − α); g ← g + μ·λ, per named parameter."""
    if grads is None:
        grads = {n: p.grad.detach() for n, p in m.named_parameters() if p.requires_grad and p.grad is not None}
    for n, p in m.named_parameters():
        if p.requires_grad and p.grad is not None:
            grads[n] = grads[n] * alpha + p.grad.detach() * (1 - alpha)
            p.grad = p.grad + grads[n] * lamb
    return grads


def _net(dtype):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grokfast_ema_equals_gradfilter_ema_on_the_same_gradient_sequence(dtype):
    ours, ref = _net(dtype), _net(dtype)
    transform = GrokfastEMA(GrokfastEMAConfig(alpha=0.9, lamb=3.0), ours)
    state = None
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        for a, b in zip(ours.parameters(), ref.parameters()):
            g = torch.randn(a.shape, generator=gen, dtype=dtype)
            a.grad, b.grad = g.clone(), g.clone()
        transform.apply()
        state = gradfilter_ema(ref, state, alpha=0.9, lamb=3.0)
        for a, b in zip(ours.parameters(), ref.parameters()):
            assert torch.equal(a.grad, b.grad)                      # bit for bit
    assert all(torch.equal(transform.ema[n], state[n]) for n in state)


def test_grokfast_ema_first_step_amplifies_by_one_plus_lambda_and_skips_unmatched_parameters():
    net = _net(torch.float64)
    transform = GrokfastEMA(GrokfastEMAConfig(lamb=2.0, params=["2.*"]), net)
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    transform.apply()
    assert torch.equal(net[0].weight.grad, torch.ones_like(net[0].weight))      # not selected
    torch.testing.assert_close(net[2].weight.grad, torch.full_like(net[2].weight, 3.0), atol=1e-15, rtol=0)


# ---------------------------------------------------------------- Fourier projections
class Embedder(nn.Module):
    def __init__(self, vocab=99, d=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)


def _transforms(configs, model):
    cfg = config_from_dict(merge(BASE, {"train": {"grad_transforms": configs}}))
    return GradTransforms(cfg.train.grad_transforms, model)


def test_pfft_projects_the_number_rows_and_keeps_the_equals_row():
    model = Embedder()
    g = torch.randn(99, 4, generator=torch.Generator().manual_seed(0))
    model.embed.weight.grad = g.clone()
    _transforms([{"kind": "pfft", "param": "embed.weight", "length": 97, "prescription": "wrong_high"}], model).apply()
    torch.testing.assert_close(model.embed.weight.grad, project_modes(g, [30, 35, 40, 45, 48], axis=0, n=97),
                               atol=0, rtol=0)
    assert torch.equal(model.embed.weight.grad[97:], g[97:])


def test_prescriptions_are_the_sets_of_table_1():
    assert prescription_modes("nanda3", 97) == [1, 14, 41]
    assert prescription_modes("wrong_high", 97) == [30, 35, 40, 45, 48]
    assert prescription_modes("no_low", 97) == list(range(4, 49))
    with pytest.raises(ValueError, match="choose one of"):
        prescription_modes("nyquist", 97)


def test_adaptive_fgp_keeps_the_k_strongest_modes_of_this_step():
    model = Embedder(vocab=97)
    t = torch.arange(97, dtype=torch.float32)[:, None]
    waves = {7: 3.0, 20: 2.0, 33: 1.5, 45: 0.2}
    g = sum(a * torch.cos(2 * math.pi * k * t / 97 + k) for k, a in waves.items()) * torch.ones(1, 4)
    g = g + 5.0                                                     # a large DC that skip_dc ignores
    model.embed.weight.grad = g.clone()
    transforms = _transforms([{"kind": "fgp_adaptive", "param": "embed.weight", "top_k": 3}], model)
    transforms.apply()
    torch.testing.assert_close(model.embed.weight.grad, project_modes(g, [7, 20, 33], axis=0), atol=0, rtol=0)
    assert transforms.state_dict() == [{"kind": "fgp_adaptive", "state": {}}]


def test_adaptive_fgp_picks_its_modes_by_the_chosen_reading_of_the_power():
    """Columns that cancel at mode 7 and share mode 20: summed over the embedding dimension (the default, seed
    003 §4.1) mode 20 is the strongest; the summed column powers put mode 7 first."""
    t = torch.arange(97, dtype=torch.float32)[:, None]
    c7, c20 = torch.cos(2 * math.pi * 7 * t / 97), torch.cos(2 * math.pi * 20 * t / 97)
    g = torch.cat([3 * c7 + c20, -3 * c7 + c20], dim=1)                              # [97, 2]
    chosen = {}
    for power in ("power_of_sum", "sum_of_powers"):
        model = Embedder(vocab=97)
        model.embed.weight.grad = torch.cat([g, g], dim=1).clone()                   # [97, 4]
        transforms = _transforms([{"kind": "fgp_adaptive", "param": "embed.weight", "top_k": 1,
                                   "fourier_power": power}], model)
        transforms.apply()
        chosen[power] = model.embed.weight.grad.clone()
    full = torch.cat([g, g], dim=1)
    torch.testing.assert_close(chosen["power_of_sum"], project_modes(full, [20], axis=0), atol=1e-6, rtol=0)
    torch.testing.assert_close(chosen["sum_of_powers"], project_modes(full, [7], axis=0), atol=1e-6, rtol=0)


@pytest.mark.parametrize("entry,match", [
    ({"kind": "fgp", "param": "embed.weight", "modes": [49]}, r"0\.\.48"),
    ({"kind": "fgp", "param": "embed.wieght", "modes": [1]}, "no parameter 'embed.wieght'.*embed.weight"),
    ({"kind": "pfft", "param": "embed.weight", "axis": 1, "prescription": "wrong_high"}, r"0\.\.2"),
    ({"kind": "pfft", "param": "embed.weight", "length": 100, "prescription": "quint"}, r"\[2, 97\]"),
    ({"kind": "fgp_adaptive", "param": "embed.weight", "top_k": 49}, "exceeds the 48 modes"),
    ({"kind": "grokfast_ema", "params": ["blocks.*"]}, r"\['blocks\.\*'\] match no trainable parameter"),
])
def test_bad_transforms_are_refused_naming_what_is_wrong(entry, match):
    with pytest.raises(ValueError, match=match):
        _transforms([entry], Embedder(vocab=97))


@pytest.mark.parametrize("entry,match", [
    ({"kind": "fgq", "param": "x"}, "fgp"),
    ({"kind": "pfft", "param": "x", "prescription": "nyquist"}, "wrong_high"),
    ({"kind": "grokfast_ema", "alpha": 1.0}, "alpha"),
    ({"kind": "fgp", "param": "x", "modes": [1], "lr": 2}, "lr"),
])
def test_bad_transform_configs_are_refused(entry, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict(merge(BASE, {"train": {"grad_transforms": [entry]}}))


# ---------------------------------------------------------------- in the loop: resume
TRANSFORMS = [{"kind": "pfft", "param": "model.embed_tokens.weight", "prescription": "quint"},
              {"kind": "grokfast_ema", "alpha": 0.9, "lamb": 2.0}]
RUN = {"train": {"steps": 8, "checkpoint_every": 4, "keep_last": 5, "grad_transforms": TRANSFORMS},
       "data": {"num_eval": 0}}


def _final_weights(run):
    return load_file(run / "checkpoints" / "step_00000008" / "model.safetensors")


def _rewind_to_step_4(run, tmp_path, name):
    """A copy of the run folder as it was after step 4 (later checkpoints and outputs removed)."""
    copy = tmp_path / "runs" / name
    shutil.copytree(run, copy)
    for ckpt in list_checkpoints(copy)[1:]:
        shutil.rmtree(ckpt)
    for extra in ("final", "summary.json", "curves.png"):
        shutil.rmtree(copy / extra) if (copy / extra).is_dir() else (copy / extra).unlink()
    saved = yaml.safe_load((copy / "config.yaml").read_text())
    (copy / "config.yaml").write_text(yaml.safe_dump({**saved, "name": name}))
    return copy


def test_a_run_with_a_stateful_transform_resumes_bit_for_bit(write_config, tmp_path):
    path = write_config("straight", RUN)
    train(load_config(path))
    run = tmp_path / "runs" / "straight"
    state = torch.load(list_checkpoints(run)[0] / STATE_FILE, weights_only=True)
    assert [s["kind"] for s in state["grad_transforms"]] == ["pfft", "grokfast_ema"]
    assert "model.embed_tokens.weight" in state["grad_transforms"][1]["state"]

    rewound = _rewind_to_step_4(run, tmp_path, "resumed")
    train(load_config(path, ["name=resumed"]), resume=True)
    a, b = _final_weights(run), _final_weights(rewound)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)

    # the control: the same resume without the EMA state drifts, so the saved state is what makes it exact
    forgetful = _rewind_to_step_4(run, tmp_path, "forgetful")
    step4 = list_checkpoints(forgetful)[0] / STATE_FILE
    state = torch.load(step4, weights_only=True)
    state["grad_transforms"][1]["state"] = {}
    torch.save(state, step4)
    seal_checkpoint(step4.parent)  # edited on purpose: new checksums
    train(load_config(path, ["name=forgetful"]), resume=True)
    c = _final_weights(forgetful)
    assert not all(a[k].equal(c[k]) for k in a)


def test_resume_refuses_a_checkpoint_written_with_other_transforms(write_config, tmp_path):
    path = write_config("mismatch", RUN)
    train(load_config(path))
    run = tmp_path / "runs" / "mismatch"
    step4 = list_checkpoints(run)[0]
    for later in list_checkpoints(run)[1:]:
        shutil.rmtree(later)
    state = torch.load(step4 / STATE_FILE, weights_only=True)
    state["grad_transforms"] = state["grad_transforms"][:1]
    torch.save(state, step4 / STATE_FILE)
    seal_checkpoint(step4)
    with pytest.raises(ValueError, match=r"written with grad transforms \['pfft'\].*same train.grad_transforms"):
        train(load_config(path), resume=True)
