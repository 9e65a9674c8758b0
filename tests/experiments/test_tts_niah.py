"""The tts and niah experiments: equal compute, summaries over seeds, a micro run end to end."""
import json

import pytest

from assocmem.probes.experiments.niah import NIAHExperimentConfig
from assocmem.probes.experiments.niah import run_experiment as run_niah
from assocmem.probes.experiments.tts import TTSExperimentConfig, equal_compute, seed_metrics, summarize
from assocmem.probes.experiments.tts import run_experiment as run_tts_experiment
from assocmem.training.results import read_result


pytestmark = pytest.mark.usefixtures("one_thread")


def _fake(cost_short, cost_long, base):
    curve = [min(1.0, base * k) for k in range(1, 9)]
    return {"ms_per_sample": {"short": cost_short, "long": cost_long}, "pass@1 by rule": {"strict": base / 2},
            "train_seconds": 60.0, "metrics": {m: curve for m in ("pass@k", "maj@k (first k)", "maj@k (random k)",
                                                                    "best-of-N@k (mean log-prob)",
                                                                    "weighted vote@k (random k)")}}


def test_equal_compute_gives_the_cheaper_model_more_samples():
    cfg = TTSExperimentConfig(samples=8, models={"cheap": "gdn", "dear": "attn"})
    results = {"cheap": _fake(1.0, 1.0, 0.05), "dear": _fake(3.0, 4.0, 0.2)}
    rows = equal_compute(results, cfg, "long", "pass@k")
    assert [r["budget_ms"] for r in rows] == [4.0, 8.0, 16.0, 32.0]
    assert [r["cheap"]["k"] for r in rows] == [4, 8, 8, 8] and [r["dear"]["k"] for r in rows] == [1, 2, 4, 8]
    assert rows[0]["cheap"]["value"] == pytest.approx(0.2) and rows[0]["dear"]["value"] == pytest.approx(0.2)
    summary = summarize({0: results, 1: {"cheap": _fake(1.0, 1.0, 0.1), "dear": _fake(3.0, 4.0, 0.2)}}, cfg)
    assert summary["metrics"]["cheap"]["pass@k"][0] == {"mean": pytest.approx(0.075), "min": 0.05, "max": 0.1,
                                                        "n": 2}
    first = summary["equal_compute"]["pass@k, long context"][0]
    assert first["cheap"]["k"] == [4, 4] and first["cheap"]["mean"] == pytest.approx((0.2 + 0.4) / 2)
    flat = seed_metrics({0: results}, cfg)[0]
    assert flat["cheap pass@8"] == pytest.approx(0.4) and flat["dear ms/sample long ctx"] == 4.0


def test_micro_runs_end_to_end(tmp_path):
    tts = TTSExperimentConfig(models={"gdn": "gdn"}, d_model=16, num_digits=2, num_train=64, steps=2,
                              batch_size=8, num_problems=3, samples=2, long_context=32, cost_steps=2, cost_batch=2)
    out = run_tts_experiment(tts, [0, 1], tmp_path / "tts")
    stored = json.loads((tmp_path / "tts" / "tts_experiment.json").read_text())
    assert stored["seeds"] == [0, 1] and set(stored["summary"]["metrics"]) == {"gdn"}
    assert (tmp_path / "tts" / "tts_experiment.png").is_file()
    for seed in ("0", "1"):
        for label in ("gdn",):
            per_model = json.loads((tmp_path / "tts" / f"seed_{seed}" / "models" / label / "tts.json").read_text())
            assert per_model["metrics"]["pass@k"]["mean"] == stored["per_seed"][seed][label]["metrics"]["pass@k"]
    assert out["per_seed_raw"][0]["gdn"]["ms_per_sample"]["long"] > 0
    niah = NIAHExperimentConfig(models={"gdn": "gdn"}, d_model=16, train_length=16, num_train=32, steps=2,
                                batch_size=8, lengths=[16, 32], depths=[0.0, 1.0], trials=2)
    run_niah(niah, [0], tmp_path / "niah")
    stored = json.loads((tmp_path / "niah" / "niah_experiment.json").read_text())
    assert stored["summary"]["gdn"]["within_train_length"]["mean"] == stored["per_seed"]["0"]["gdn"][
        "mean_within_train_length"]
    assert (tmp_path / "niah" / "niah_gdn.png").is_file() and (tmp_path / "niah" / "niah_experiment.png").is_file()


def test_the_cli_writes_a_result_record_and_refuses_to_replace_it(tmp_path, monkeypatch, capsys):
    from assocmem.probes.experiments import niah as experiment_niah
    from assocmem.cli import main as cli_main

    micro = NIAHExperimentConfig(models={"gdn": "gdn"}, d_model=16, train_length=16, num_train=32, steps=2,
                                 batch_size=8, lengths=[16], depths=[0.5], trials=2)
    monkeypatch.setattr(experiment_niah.NIAHExperimentConfig, "quick", classmethod(lambda cls: micro))
    result = tmp_path / "niah.json"
    args = ["experiment", "niah", "--quick", "--seeds", "0", "--out", str(tmp_path / "o"), "--result", str(result)]
    assert cli_main(args) == 0
    record = read_result(result)
    assert record.seeds == [0] and "gdn within L<=16" in record.summary
    assert record.command.startswith("assocmem experiment niah --quick --seeds 0")
    assert cli_main(args) == 2 and "exists" in capsys.readouterr().err
