"""The rl experiment: a micro run end to end, its table and its result record."""
from __future__ import annotations

import json

import numpy as np

from assocmem.probes.experiments.rl import RLExperimentConfig, markdown_table, run_experiment
from assocmem.training.results import read_result
from assocmem.training.runlog import read_log

MICRO = dict(d_model=16, num_heads=2, mlp_ratio=0.0, num_digits=2, sft_train=64, sft_steps=12, sft_batch=8,
             rl_train=8, rounds=2, prompts=2, group_size=2, eval_every=1, eval_samples=1, num_problems=3, samples=2)


def test_micro_run_end_to_end(tmp_path):
    cfg = RLExperimentConfig(**MICRO, methods=["Dr. GRPO + dapo", "self-distillation"])
    out = run_experiment(cfg, [0, 1], tmp_path / "rl")
    stored = json.loads((tmp_path / "rl" / "rl_experiment.json").read_text())
    assert stored["seeds"] == [0, 1] and (tmp_path / "rl" / "rl_experiment.png").is_file()
    assert (tmp_path / "rl" / "sft" / "final" / "config.json").is_file()     # one SFT model, shared
    for seed in (0, 1):
        results = out["per_seed_raw"][seed]
        for method in cfg.methods:
            r = results[method]
            assert r["pass@1"] * 6 == round(r["pass@1"] * 6)                 # 3 problems × 2 samples
            logged = [x["g_neg_over_g_pos"] for x in read_log(tmp_path / "rl" / f"seed_{seed}" / "runs" /
                      ("Dr_GRPO_plus_dapo" if method == "Dr. GRPO + dapo" else method) / "log.jsonl")
                      if x["split"] == "train"]
            assert r["ratio"] == logged and len(logged) == 2
            assert r["ratio_by_quarter"] == {"1-1": logged[0], "2-2": logged[1]}
            assert [s for s, _ in r["eval"]] == [0, 1, 2]
    row = stored["summary"]["rows"]["self-distillation"]["pass@1"]
    values = [out["per_seed_raw"][s]["self-distillation"]["pass@1"] for s in (0, 1)]
    assert row["mean"] == np.mean(values) and row["min"] == min(values)
    table = markdown_table(stored["summary"], cfg)
    assert "| self-distillation |" in table and "| ‖g⁻‖/‖g⁺‖, rounds | 1-1 | 2-2 |" in table


def test_the_cli_writes_a_result_record(tmp_path, monkeypatch, capsys):
    from assocmem.probes.experiments import rl as experiment_rl
    from assocmem.cli import main as cli_main

    micro = RLExperimentConfig(**{**MICRO, "eval_every": 0}, methods=["gradient-balanced"])
    monkeypatch.setattr(experiment_rl.RLExperimentConfig, "quick", classmethod(lambda cls: micro))
    result = tmp_path / "rl.json"
    args = ["experiment", "rl", "--quick", "--seeds", "0", "--out", str(tmp_path / "o"), "--result", str(result)]
    assert cli_main(args) == 0
    record = read_result(result)
    assert record.seeds == [0] and "gradient-balanced pass@1" in record.summary and "SFT pass@1" in record.summary
    assert cli_main(args) == 2 and "exists" in capsys.readouterr().err


def test_the_lr_flag_reaches_the_config_and_the_recorded_command(tmp_path, monkeypatch):
    from assocmem.probes.experiments import rl as experiment_rl
    from assocmem.cli import main as cli_main

    micro = RLExperimentConfig(**{**MICRO, "eval_every": 0, "rounds": 1}, methods=["GRPO"])
    monkeypatch.setattr(experiment_rl.RLExperimentConfig, "quick", classmethod(lambda cls: micro))
    result = tmp_path / "rl.json"
    args = ["experiment", "rl", "--lr", "2e-4", "--quick", "--seeds", "0", "--out", str(tmp_path / "o"),
            "--result", str(result)]
    assert cli_main(args) == 0
    record = read_result(result)
    assert record.command.startswith("assocmem experiment rl --lr 0.0002 --quick --seeds 0")
    stored = json.loads((tmp_path / "o" / "rl_experiment.json").read_text())
    assert stored["config"]["rl_lr"] == 2e-4
    rl_config = (tmp_path / "o" / "seed_0" / "runs" / "GRPO" / "config.yaml").read_text()
    assert "lr: 0.0002" in rl_config


def test_beta_and_methods_reach_the_config_the_rl_runs_and_the_recorded_command(tmp_path, monkeypatch):
    from assocmem.probes.experiments import rl as experiment_rl
    from assocmem.cli import main as cli_main

    micro = RLExperimentConfig(**{**MICRO, "eval_every": 0, "rounds": 1})
    monkeypatch.setattr(experiment_rl.RLExperimentConfig, "quick", classmethod(lambda cls: micro))
    result = tmp_path / "rl.json"
    args = ["experiment", "rl", "--beta", "0.1", "--methods", "GRPO", "Dr. GRPO + dapo", "--quick",
            "--seeds", "0", "--out", str(tmp_path / "o"), "--result", str(result)]
    assert cli_main(args) == 0
    record = read_result(result)
    assert record.command.startswith("assocmem experiment rl --beta 0.1 --methods GRPO 'Dr. GRPO + dapo' "
                                     "--quick --seeds 0")
    assert {k for k in record.summary if k.endswith("pass@1")} == {"SFT pass@1", "GRPO pass@1", "Dr. GRPO + dapo pass@1"}
    stored = json.loads((tmp_path / "o" / "rl_experiment.json").read_text())
    assert stored["config"]["beta"] == 0.1 and stored["config"]["methods"] == ["GRPO", "Dr. GRPO + dapo"]
    runs = tmp_path / "o" / "seed_0" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["Dr_GRPO_plus_dapo", "GRPO"]
    for run in runs.iterdir():
        assert "beta: 0.1" in (run / "config.yaml").read_text()
        assert all(r["kl"] >= 0 for r in read_log(run / "log.jsonl") if r["split"] == "train")


def test_an_unknown_method_is_refused_with_the_known_ones(capsys):
    import pytest

    from assocmem.cli import main as cli_main

    with pytest.raises(SystemExit):
        cli_main(["experiment", "rl", "--methods", "PPO", "--quick", "--out", "x"])
    err = capsys.readouterr().err
    assert "invalid choice: 'PPO'" in err and "'GRPO'" in err and "'self-distillation'" in err


def test_a_kl_weight_with_self_distillation_is_refused_before_any_work(tmp_path, capsys):
    from assocmem.cli import main as cli_main

    out = tmp_path / "o"
    assert cli_main(["experiment", "rl", "--beta", "0.1", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "beta = 0.1: self-distillation: loss.beta = 0.1 has no effect with loss.algorithm: self_distillation" in err
    assert "Or run the other methods only (--methods 'GRPO' 'Dr. GRPO + dapo' 'gradient-balanced')" in err
    assert not out.exists()
