"""The Wiola experiment's measurements on untrained tiny models (the full run is a CLI command):
the causal models lose nothing under the random-future control, bit for bit, in either mode; the
as-written one does; μ is measured in the ATM layers only; the variants have nearly equal size."""
import pytest
import torch

from assocmem.models import build_model
from assocmem.probes.experiments.wiola import (
    VARIANTS, WiolaExperimentConfig, hybrid_configs, markdown_table, measure, seed_metrics,
)
from assocmem.training.results import summarize

CFG = WiolaExperimentConfig.quick().model_copy(update={"eval_blocks": 4})


def _blocks():
    text = ("Ada went to the harbour with two lamps. Ada said the lamp cost 5 coins at the harbour. " * 8).encode()
    ids = torch.tensor(list(text[: 4 * CFG.seq_len])).view(4, CFG.seq_len)
    return ids


@pytest.fixture(scope="module")
def measured():
    torch.manual_seed(0)
    return {v: measure(CFG, build_model(h).eval(), _blocks()) for v, h in hybrid_configs(CFG).items()}


def test_causal_models_pass_the_control_exactly(measured):
    for variant in ("baseline", "wiola"):
        for mode in ("eval", "train"):
            assert measured[variant][mode]["control_rise"] == 0.0, (variant, mode)
            assert measured[variant][mode]["cut_loss"] == measured[variant][mode]["control_loss"]


def test_as_written_model_reads_the_future(measured):
    assert measured["wiola_as_written"]["eval"]["control_rise"] != 0.0  # GCLA's mean over all T


def test_merge_ratio_only_where_atm_runs(measured):
    assert measured["baseline"]["mu"] is None
    assert list(measured["wiola"]["mu_per_layer"]) == [1]  # 3 layers: ATM in [1, 2)
    assert 0 <= measured["wiola"]["mu"] <= 0.5


def test_variants_have_nearly_equal_size():
    full = WiolaExperimentConfig()
    sizes = {v: sum(p.numel() for p in build_model(h).parameters()) for v, h in hybrid_configs(full).items()}
    assert abs(sizes["wiola"] / sizes["baseline"] - 1) < 0.005 and sizes["wiola"] == sizes["wiola_as_written"]


def test_seed_metrics_and_table(measured):
    results = [{"variant": v, "seed": 0, **m} for v, m in measured.items()]
    per_seed = seed_metrics(results)
    assert per_seed[0]["wiola_minus_baseline/eval/loss"] == pytest.approx(
        measured["wiola"]["eval"]["loss"] - measured["baseline"]["eval"]["loss"])
    table = markdown_table(summarize(per_seed))
    assert all(v in table for v in VARIANTS)


@pytest.mark.slow
def test_quick_command_writes_the_record(tmp_path):
    import json

    from assocmem.cli import main

    result = tmp_path / "r.json"
    code = main(["experiment", "wiola", "--quick", "--seeds", "0", "--jobs", "1", "--out", str(tmp_path / "o"),
                 "--result", str(result)])
    assert code == 0
    record = json.loads(result.read_text())
    assert record["seeds"] == [0] and record["per_seed"]["0"]["baseline/eval/control_rise"] == 0.0
