"""The Wiola paper's numbers as recomputed by probes/experiments/wiola_claims.py: what holds and what does not."""
import pytest

from assocmem.probes.experiments import wiola_claims as claims


def test_eq10_printed_is_wrong_unless_gamma_is_one():
    r = claims.rmsnorm_gradient_claim()
    assert r["eq10_printed_vs_central_differences"] > 1e-2
    assert r["eq10_corrected_vs_central_differences"] < 1e-7 and r["autograd_vs_central_differences"] < 1e-7
    assert r["eq10_printed_vs_autograd_gamma_one"] < 1e-12


def test_srpe_is_relative_only_without_its_radial_term():
    r = claims.srpe_claims()
    assert r["score_spread_a_s_0"] < 1e-11 and r["score_spread_a_s_0.1"] > 0.1
    assert r["a_s_0_vs_rope_scaled_frequencies"] < 1e-11


def test_kv_cache_is_half_the_printed_figure():
    r = claims.kv_cache_claim()
    assert r["eq38_arithmetic_bytes"] == 33_554_432  # 33.55 MB, not 67.1 MB
    assert r["eq38_arithmetic_bytes"] < r["model_cache_bytes"] < r["eq38_arithmetic_bytes"] * 1.01
    assert r["mha_same_heads_bytes"] / r["eq38_arithmetic_bytes"] == 4.0


def test_gqa_does_not_reduce_score_flops():
    r = claims.gqa_flops_claim(seq_len=256)
    assert r["gqa_measured"] == r["mha_measured"] == r["eq39_mha"] != r["eq40_gqa_claimed"]


def test_gcla_overhead():
    r = claims.gcla_overhead_claim()
    assert r["as_written_overhead_context_only"] < 2 * r["paper_overhead"]   # the sub-attention: ≈ Λ/T
    assert 0.1 < r["as_written_overhead_with_gate"] < 0.2                     # + the gate projection W_gate
    assert r["causal_overhead_with_gate"] > r["as_written_overhead_with_gate"]  # per-position summaries


@pytest.mark.parametrize("mu,low,high", [(0.08, 0.005, 0.02), (0.14, 0.01, 0.03)])
def test_atm_saves_far_less_than_claimed(mu, low, high):
    r = claims.atm_flops_claim(mu)
    assert r["delta_C_per_layer"] == pytest.approx(mu * (2 - mu))
    assert low < r["model_saving"] < high and r["atm_layers"] == 5


def test_flat_metrics_keep_numbers_only():
    flat = claims.flat_metrics({"a": {"x": 1, "s": "4-6x", "n": {"y": 2.0, "t": "text"}}})
    assert flat == {"a/x": 1.0, "a/n/y": 2.0}


def test_a_missing_mu_record_is_refused_before_any_work(tmp_path, capsys):
    from assocmem.cli import main

    out = tmp_path / "o"
    assert main(["experiment", "wiola-claims", "--mu-from", str(tmp_path / "none.json"), "--out", str(out)]) == 2
    assert "assocmem experiment wiola-claims: no result record at" in capsys.readouterr().err and not out.exists()
