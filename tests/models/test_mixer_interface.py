"""One interface for every mixer module (mixers/layer.MixerModule): models/ never asks which class a
module is, so a new module kind plugs in through mixers/layer.MODULE_KINDS alone."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from assocmem.memories import GD, L2, Diagonal
from assocmem.mixers import MixerSpec, get_preset, list_presets
from assocmem.mixers import layer as mixer_layer
from assocmem.mixers.layer import MixerModule, build_mixer
from assocmem.models import HybridConfig, build_model, output_cache

BLOCKS = Path(__file__).resolve().parents[2] / "models" / "blocks.py"


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_builds_a_mixer_module(name):
    spec = get_preset(name)
    spec = spec.model_copy(update={"layer": spec.layer.model_copy(update={"num_heads": 2, "head_dim": 8})})
    module = build_mixer(spec, 16, form="recurrent")  # every class has one (no compile)
    assert isinstance(module, MixerModule)
    assert module.masks_padding == (name in ("softmax", "sliding_window", "mla"))
    x = torch.randn(2, 5, 16)
    y, state = module(x, return_state=False)
    assert y.shape == x.shape and state is None
    if not module.masks_padding:
        with pytest.raises(ValueError, match="does not mask padding.*run_mixer"):
            module(x, mask=torch.ones(2, 5, dtype=torch.bool))


def test_blocks_never_branch_on_a_module_class():
    tree = ast.parse(BLOCKS.read_text())
    checked = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") ==
               "isinstance"]
    assert all("state" in c for c in checked), checked  # only the state pytree's leaves are told apart
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not imported & {"Attention", "SCALayer", "Mixer"}


class RunningMean(nn.Module):
    """A toy module kind: y_t = mean of (x W) over s ≤ t; state (sum [B, D], count [B])."""

    masks_padding = False

    def __init__(self, d_model: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, *, state=None, mask=None, return_state=True):
        assert mask is None, "models/ must not hand a mask to a module that does not mask padding"
        B, T, D = x.shape
        total, count = state if state is not None else (x.new_zeros(B, D), x.new_zeros(B))
        sums = self.proj(x).cumsum(1) + total[:, None]  # [B, T, D]
        counts = count[:, None] + torch.arange(1, T + 1, dtype=x.dtype)  # [B, T]
        y = sums / counts[..., None]
        return y, ((sums[:, -1], counts[:, -1]) if return_state else None)

    def state_size(self) -> int:
        return self.proj.in_features + 1


def test_a_new_module_kind_needs_no_branch_in_models(monkeypatch):
    monkeypatch.setitem(mixer_layer.MODULE_KINDS, "diagonal", lambda spec, d, form, idx: RunningMean(d))
    mean = MixerSpec(name="running_mean", memory=Diagonal(), bias=L2(), optimizer=GD())
    torch.manual_seed(0)
    model = build_model(HybridConfig(d_model=16, vocab_size=32, layers=[mean, "attn"], num_heads=2,
                                     mlp_ratio=0)).double().eval()
    assert isinstance(model.model.layers[0].mixer, RunningMean)
    ids = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        full = model(ids).logits
        # prefill 6 tokens, then decode 3 one at a time through the cache
        out = model(ids[:, :6])
        cache, steps = output_cache(out), [out.logits]
        for t in range(6, 9):
            out = model(ids[:, t:t + 1], cache=cache)
            steps.append(out.logits)
        torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-12, rtol=0)
        # a left-padded row gives the logits of its unpadded sequence (run_mixer regroups the rows)
        padded = torch.cat([torch.zeros(1, 3, dtype=ids.dtype), ids[:1, :6]], 1)
        mask = torch.cat([torch.zeros(1, 3), torch.ones(1, 6)], 1).long()
        got = model(torch.cat([padded, ids[1:, :9]]), attention_mask=torch.cat([mask, torch.ones(1, 9).long()])).logits
    torch.testing.assert_close(got[0, 3:], model(ids[:1, :6]).logits[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(got[1], full[1], atol=1e-12, rtol=0)
