"""The distill experiment: a micro run end to end, its numbers checked against the run folders it leaves."""
import json

import pytest

from assocmem.probes.experiments.distill import DistillExperimentConfig, markdown_table, run_experiment, seed_metrics
from assocmem.training.evaluate import evaluate_run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_micro_run_reports_what_the_run_folders_hold(tmp_path):
    cfg = DistillExperimentConfig.quick().model_copy(update={"teacher_steps": 4, "stage2_steps": 2,
                                                             "stage3_steps": 2, "stage4_steps": 2})
    result = run_experiment(cfg, [0], tmp_path)
    runs = tmp_path / "seed_0" / "runs"
    flat = seed_metrics(result["per_seed_raw"], cfg)[0]
    stage1 = json.loads((runs / "gdn50" / "stage1" / "summary.json").read_text())
    assert stage1["replaced"] == [1, 3]                                      # 50 % of 4 layers, Table 3.3 spacing
    assert flat["teacher/accuracy"] == pytest.approx(stage1["teacher_eval"]["accuracy"], abs=1e-6)
    assert flat["gdn50/stage4"] == pytest.approx(evaluate_run(runs / "gdn50" / "stage4")["accuracy"], abs=1e-6)
    assert flat["gdn50/scratch"] == pytest.approx(evaluate_run(runs / "gdn50-scratch")["accuracy"], abs=1e-6)
    scratch = json.loads((runs / "gdn50-scratch" / "summary.json").read_text())
    assert scratch["steps"] == 6 and scratch["tokens"] == json.loads(
        (runs / "gdn50" / "stage2" / "summary.json").read_text())["tokens"] * 3   # the same tokens as stages 2-4
    assert 0.0 <= flat["gdn50/min_energy_ratio"] and f"{flat['gdn50/stage1']:.3f}" in markdown_table(
        result["summary"], cfg)
