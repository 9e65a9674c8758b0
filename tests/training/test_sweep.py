"""Sweep files: product of labelled axes, resumable execution, best-over-lr table."""
import json

import yaml

from assocmem.cli import main as cli_main
from assocmem.training.sweep import load_sweep
from training_helpers import BASE, merge

SWEEP = {"best_over": "lr", "axes": {
    "kv": {"K2": {"data.num_kv_pairs": 2}, "K4": {"data.num_kv_pairs": 4}},
    "lr": {"lo": {"optim.lr": 1.0e-5}, "hi": {"optim.lr": 1.0e-2}}}}


def _write(tmp_path):
    data = merge(BASE, {"name": "sw", "output_dir": str(tmp_path / "runs"),
                        "train": {"steps": 3, "log_every": 3}, "optim": {"warmup_steps": 0}})
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**data, "sweep": SWEEP}, sort_keys=False))
    return path


def test_axes_expand_to_named_configs(tmp_path):
    spec, runs = load_sweep(_write(tmp_path), ["train.steps=5"])
    assert [cfg.name for _, cfg in runs] == ["sw-K2-lo", "sw-K2-hi", "sw-K4-lo", "sw-K4-hi"]
    assert [(cfg.data.num_kv_pairs, cfg.optim.lr, cfg.train.steps) for _, cfg in runs] == [
        (2, 1e-5, 5), (2, 1e-2, 5), (4, 1e-5, 5), (4, 1e-2, 5)]
    assert spec.best_over == "lr" and runs[1][0] == {"kv": "K2", "lr": "hi"}


def test_sweep_trains_skips_finished_runs_and_tabulates_the_best_lr(tmp_path, capsys):
    path = _write(tmp_path)
    assert cli_main(["train", str(path), "--only", "K2"]) == 0
    assert cli_main(["train", str(path), "--list"]) == 0
    listing = capsys.readouterr().out
    assert "done     sw-K2-lo" in listing and "new      sw-K4-hi" in listing
    assert cli_main(["train", str(path), "--only", "K2"]) == 0
    assert "sw-K2-hi: done, skipped" in capsys.readouterr().out
    table = json.loads((tmp_path / "runs" / "sweep.results.json").read_text())
    assert len(table) == 1 and table[0]["kv"] == "K2"
    summaries = {lr: json.loads((tmp_path / "runs" / f"sw-K2-{lr}" / "summary.json").read_text())["eval"]["accuracy"]
                 for lr in ("lo", "hi")}
    best = max(summaries, key=summaries.get)
    assert table[0]["best"] == best and table[0]["accuracy"] == summaries[best]


def test_every_bundled_config_validates():
    """Each YAML in training/configs/ loads: sweeps expand to valid TrainConfigs, others validate."""
    from assocmem.training.config import load_config
    from assocmem.training.config_files import BUNDLED
    from assocmem.training.sweep import is_sweep

    paths = sorted(BUNDLED.glob("*.yaml"))
    assert {p.stem for p in paths} >= {"mqar_gdn_target", "mqar_zoology_fig2", "mqar_zoology_fig2_cpu",
                                       "graph_walk_hybrid"}
    for path in paths:
        if is_sweep(path):
            _, runs = load_sweep(path)
            assert runs and len({cfg.name for _, cfg in runs}) == len(runs), path.name
        else:
            assert load_config(path).name, path.name


def test_sweep_with_seeds_runs_each_combination_per_seed_and_writes_a_record(tmp_path, capsys):
    from assocmem.training.results import read_result

    path = _write(tmp_path)
    spec, runs = load_sweep(path, seeds=[3, 4])
    assert [cfg.name for _, cfg in runs][:3] == ["sw-K2-lo-s3", "sw-K2-lo-s4", "sw-K2-hi-s3"]
    assert [cfg.seed for _, cfg in runs] == [3, 4] * 4 and list(spec.axes)[-1] == "seed"
    result = tmp_path / "sw.json"
    assert cli_main(["train", str(path), "--seeds", "3", "4", "--only", "K2", "--result", str(result)]) == 0
    record = read_result(result)
    for seed in (3, 4):  # per seed: the best accuracy over lr of the row, as the runs' summaries give it
        accs = [json.loads((tmp_path / "runs" / f"sw-K2-{lr}-s{seed}" / "summary.json").read_text())["eval"]["accuracy"]
                for lr in ("lo", "hi")]
        assert record.values("K2")[seed] == max(accs)
    assert set(record.per_seed["3"]) == {"K2"} and record.command.endswith(f"--only K2 --result {result}")
    assert "K2" in capsys.readouterr().out
