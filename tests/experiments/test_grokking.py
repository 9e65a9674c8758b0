"""The grokking experiment (seed 003 §5): how a run is read, and one tiny end-to-end run."""
import json
import re

import pytest

from assocmem.probes.experiments.grokking import (PAPER, VARIANTS, first_epoch_at, grokking_epoch, held_for, markdown_table,
                                      nanda_config, result_name, runs_for, summarize)
from assocmem.cli import main as cli_main
from assocmem.training.config import config_from_dict


def test_grokking_epoch_is_the_start_of_the_last_streak_above_threshold():
    evals = [(10, 0.1), (20, 0.995), (30, 0.5), (40, 0.99), (50, 1.0), (60, 0.999)]
    assert grokking_epoch(evals) == 40
    assert grokking_epoch(evals[:3]) is None                  # fell back below: not grokked (yet)
    assert grokking_epoch([(10, 0.2)]) is None
    assert first_epoch_at([(1, 0.3), (2, 0.991), (3, 0.2)]) == 2
    assert held_for(evals, 3) and not held_for(evals, 4) and not held_for(evals[:1], 1)


def test_every_variant_is_a_valid_nanda_config(tmp_path):
    for variant in VARIANTS:
        cfg = config_from_dict(nanda_config(97, 1, variant, 10, tmp_path / variant))
        assert cfg.train.batch_size == int(0.3 * 97 * 97) and cfg.data.p == 97
        hc = cfg.model.hybrid
        assert (hc["mlp_kind"], hc["block_norm"], hc["position_embedding"]) == ("relu", "none", "learned")
    pfft = config_from_dict(nanda_config(97, 0, "pfft_wrong_high", 10, tmp_path / "x")).train.grad_transforms[0]
    assert (pfft.param, pfft.length, pfft.prescription) == ("model.embed_tokens.weight", 97, "wrong_high")
    with pytest.raises(ValueError, match="unknown variant"):
        nanda_config(97, 0, "pfft_nyquist", 10, tmp_path / "y")


def test_summary_rows_stand_beside_the_papers_numbers():
    runs = [{"p": 97, "variant": "baseline", "seed": s, "grokking_epoch": e, "memorisation_epoch": 100,
             "final_val_accuracy": a} for s, (e, a) in enumerate([(500, 1.0), (None, 0.2), (700, 0.999)])]
    (row,) = summarize(runs, epochs=800)
    assert row["grokked"] == 2 and row["etg"] == {"mean": 600.0, "min": 500.0, "max": 700.0, "n": 2}
    assert row["paper_etg"] == PAPER[97]["baseline"][0] == 782.0
    table = markdown_table([row])
    assert "| 97 | baseline | 2/3 (≤ 800) | 600 [500, 700] | 782.0 ± 95.4 | 100 [100, 100] | 450.7 |" in table


def test_a_tiny_experiment_runs_end_to_end_and_writes_its_record(tmp_path, capsys):
    out, result = tmp_path / "grok", tmp_path / "grok.json"
    code = cli_main(["experiment", "grokking", "--p", "5", "--seeds", "0", "--variants", "baseline",
                     "pfft_fundamental", "--epochs", "12", "--eval-every", "4", "--jobs", "1", "--out", str(out),
                     "--result", str(result)])
    assert code == 0
    err = capsys.readouterr().err.splitlines()  # progress: the start at once, the pool's work, each run as it ends
    assert re.fullmatch(rf"experiment grokking \([0-9.]+ s\) seeds \[0\] into {re.escape(str(out))} \.\.\.", err[0])
    assert err[1] == "grokking-experiment (1 at a time) 2 runs started: p=5 baseline seed 0, p=5 pfft_fundamental seed 0 ..."
    assert sum("grokking-experiment (1 at a time) [" in line and " done" in line for line in err) == 2
    runs = json.loads((out / "grokking.json").read_text())["runs"]
    assert [r["variant"] for r in runs] == ["baseline", "pfft_fundamental"]
    assert all(r["epochs_run"] <= 12 and [e for e, _ in r["val_curve"]][:3] == [4, 8, 12] for r in runs)
    assert all(r["init"]["grad_dominant_mode"] in (1, 2) for r in runs)         # p = 5: modes 1..2
    record = json.loads(result.read_text())
    assert record["name"] == "spectral-grokking-p5" and "p5/baseline/final_val_accuracy" in record["per_seed"]["0"]
    assert (out / "grokking.png").stat().st_size > 0
    assert cli_main(["experiment", "grokking", "--p", "5", "--out", str(tmp_path / "again"),
                     "--result", str(result)]) == 2                              # never overwrites a record


def test_a_p_specific_variant_runs_only_at_its_own_p():
    assert runs_for([97, 113], ["baseline", "pfft_spread5_p113"]) == [(97, "baseline"), (113, "baseline"),
                                                                     (113, "pfft_spread5_p113")]
    assert result_name([113]) == "spectral-grokking-p113" and result_name([97, 113]) == "spectral-grokking-p97-p113"
