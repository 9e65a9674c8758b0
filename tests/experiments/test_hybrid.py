"""The hybrid experiment: layer placement, variants, and a tiny end-to-end run."""
import json

import pytest

from assocmem.probes.experiments.hybrid import HybridExperimentConfig, attention_layers, model_variants


@pytest.mark.parametrize("n,pct,expected", [
    (4, 0, []), (4, 25, [3]), (4, 50, [1, 3]), (4, 75, [1, 2, 3]), (4, 100, [0, 1, 2, 3]),
    (12, 50, [1, 3, 5, 7, 9, 11]), (12, 25, [3, 7, 11]),  # thesis Table 4.1 placements
])
def test_attention_layers(n, pct, expected):
    assert attention_layers(n, pct) == expected


def test_variants_are_valid_hybrids():
    from assocmem.models import HybridConfig

    variants = model_variants(HybridExperimentConfig())
    assert list(variants) == ["attn000", "attn025", "attn050", "attn075", "attn100", "sca2to1"]
    names = {k: [s.name for s in HybridConfig.model_validate(v).layer_specs()] for k, v in variants.items()}
    assert names["attn025"] == ["gated_deltanet"] * 3 + ["softmax"]
    assert names["attn100"] == ["softmax"] * 4
    assert names["sca2to1"] == ["sca", "sca", "softmax"]
    with pytest.raises(ValueError, match="percent"):
        attention_layers(4, 120)


def test_tiny_experiment_end_to_end(tmp_path, capsys):
    from assocmem.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text("d_model: 16\nhead_dim: 8\nsteps: 2\nseq_len: 32\nnum_train: 16\nbatch_size: 4\n"
                      "probe_walks: 2\nwindow: 8\nattention_percents: [0, 100]\n")
    out = tmp_path / "out"
    assert main(["experiment", "hybrid", "--config", str(config), "--out", str(out)]) == 0   # one seed: 0
    summary = json.loads((out / "seed_0" / "hybrid_experiment.json").read_text())
    assert [m["label"] for m in summary["models"]] == ["attn000", "attn100", "sca2to1"]
    assert (out / "seed_0" / "hybrid_curves.png").is_file() and (out / "seed_0" / "hybrid_pca.png").is_file()
    assert "| attn100 |" in (out / "seed_0" / "hybrid_experiment.md").read_text()
    assert "| attn100 |" in capsys.readouterr().out and "| attn100 |" in (out / "hybrid_experiment.md").read_text()


def test_seeds_run_into_subfolders_and_are_summarised(tmp_path):
    from assocmem.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text("d_model: 16\nhead_dim: 8\nsteps: 2\nseq_len: 32\nnum_train: 16\nbatch_size: 4\n"
                      "probe_walks: 2\nwindow: 8\nattention_percents: [100]\nsca_hybrid: false\n")
    out, result = tmp_path / "out", tmp_path / "hybrid-tiny.json"
    argv = ["experiment", "hybrid", "--config", str(config), "--threads", "1", "--seeds", "3", "5",
            "--out", str(out), "--result", str(result)]
    assert main(argv) == 0
    runs = [json.loads((out / f"seed_{s}" / "hybrid_experiment.json").read_text()) for s in (3, 5)]
    assert [r["config"]["seed"] for r in runs] == [3, 5]
    agg = json.loads((out / "hybrid_experiment.json").read_text())["summary"]
    assert agg["seeds"] == [3, 5]
    (row,) = agg["models"]
    lows = [r["models"][0]["headline"]["min_energy_ratio_at_full_context"] for r in runs]
    assert [s["min_energy_ratio"] for s in row["seeds"]] == lows
    assert row["mean_min_energy_ratio"] == pytest.approx(sum(lows) / 2, rel=1e-12)
    assert "| attn100 |" in (out / "hybrid_experiment.md").read_text()
    assert [r["config"]["threads"] for r in runs] == [1, 1]

    from assocmem.training.results import read_result

    record = read_result(result)  # the result record: the same numbers, per seed, with the command
    assert record.name == "hybrid-tiny" and record.seeds == [3, 5]
    assert record.values("attn100/min_energy_ratio") == dict(zip((3, 5), lows))
    assert record.values("attn100/train_accuracy") == {s: r["models"][0]["train_eval"]["accuracy"]
                                                       for s, r in zip((3, 5), runs)}
    assert record.command == "assocmem " + " ".join(argv)  # the flags in the order they are declared
    assert main(argv) == 2  # the stored result is not replaced without --overwrite
