"""The recipes (training/configs/recipes/): every one validates at full size and runs with --smoke through its
command (train, a sweep, distill, rl), on the shipped corpus or a task, in seconds on a CPU."""
import json

import pytest

from assocmem.cli import main
from assocmem.training.config import ConfigError, load_config
from assocmem.training.config_files import BUNDLED, bundled_configs, resolve_config
from assocmem.training.distill.config import load_distill_config
from assocmem.training.rl.config import load_rl_config
from assocmem.training.sweep import load_sweep

RECIPES = {  # recipe -> (command, what its smoke run leaves in <output_dir>/<name>)
    "thesis_150m_pretrain": ("train", "thesis-150m-pretrain-smoke/summary.json"),
    "thesis_150m_lr_wd_sweep": ("train", "thesis-150m-lr-wd-smoke-wd0.1-lr3e-3/summary.json"),
    "nautile_pretrain_mixture": ("train", "nautile-pretrain-mixture-smoke/summary.json"),
    "thesis_table_3_2_distill": ("distill", "thesis-table-3-2-distill-smoke/stage4/summary.json"),
    "nautile_rl_balanced": ("rl", "nautile-rl-balanced-smoke/summary.json"),
}


def test_every_shipped_recipe_is_tested():
    assert sorted(f"recipes/{r}" for r in RECIPES) == [c for c in bundled_configs() if c.startswith("recipes/")]


def test_the_full_sizes_validate():
    """Without --smoke each recipe is the paper's run: the sizes the docs estimate from."""
    pretrain = load_config(resolve_config("recipes/thesis_150m_pretrain"))
    assert (pretrain.model.preset, pretrain.data.seq_len, pretrain.optim.lr, pretrain.optim.weight_decay,
            pretrain.optim.warmup_steps, pretrain.optim.betas) == ("thesis-150m-transformer", 2048, 1e-3, 0.1, 5000,
                                                                   (0.9, 0.95))
    assert pretrain.data.weights == {"openmath": 1, "metamath": 1}
    spec, runs = load_sweep(resolve_config("recipes/thesis_150m_lr_wd_sweep"))
    assert (spec.metric, spec.goal, len(runs)) == ("perplexity", "min", 6)
    nautile = load_config(resolve_config("recipes/nautile_pretrain_mixture"))
    assert nautile.data.schedule()[1][0] / nautile.train.steps == pytest.approx(350 / 600, abs=1e-4)
    distill = load_distill_config(resolve_config("recipes/thesis_table_3_2_distill"))
    assert (distill.stage3.direction, distill.stage3.optim.lr, distill.stage4.optim.lr, distill.data.seq_len,
            distill.stage3.train.epochs, distill.stage4.train.epochs) == ("reverse", 5e-6, 1e-5, 8192, 1, 2)
    rl = load_rl_config(resolve_config("recipes/nautile_rl_balanced"))
    assert (rl.loss.algorithm, rl.loss.aggregation, rl.rollout.group_size, rl.rollout.advantage_scale,
            rl.train.steps, rl.data.kind, rl.data.extractor) == ("balanced", "dapo", 4, "none", 500, "problems",
                                                                 "gsm8k")


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_recipe_runs_with_smoke(recipe, tmp_path, capsys):
    command, left = RECIPES[recipe]
    assert main([command, f"recipes/{recipe}", "--smoke", "--set", f"output_dir={tmp_path}"]) == 0, \
        capsys.readouterr().err[-2000:]
    summary = json.loads((tmp_path / left).read_text())
    assert summary["steps"] in (2, 3, 6)


def test_smoke_needs_a_smoke_section(tmp_path):
    plain = BUNDLED / "mqar_depth.yaml"
    with pytest.raises(ConfigError, match=r"has no smoke: section, so --smoke does not know how to shrink it"):
        load_config(plain, smoke=True)
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {preset: thesis-tiny-transformer}\ntrain: {steps: 2}\ndata: {kind: mqar}\nsmoke: [1]\n")
    with pytest.raises(ConfigError, match=r"smoke: must map dotted keys to values"):
        load_config(bad)
