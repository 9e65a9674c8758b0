"""The dt-stability experiment (probes/experiments/dt_stability.py): its spike measure, config and command."""
from __future__ import annotations

import math

import pytest

from assocmem.probes.experiments.dt_stability import DtStabilityConfig, spike_metrics


def test_spike_metrics_count_jumps_over_the_recent_median():
    losses = [5.0] + [2.0] * 29
    losses[20] = 3.0  # one spike: 1.5 × the median of the 10 steps before it
    m = spike_metrics(losses)
    assert (m["spikes"], m["max_jump"], m["diverged"]) == (1.0, 1.5, 0.0)
    assert m["final_loss"] == pytest.approx((19 * 2.0 + 3.0) / 20)
    assert spike_metrics([5.0] * 15 + [float("nan")])["diverged"] == 1.0
    assert spike_metrics([1.0] * 10 + [3.0] * 20)["diverged"] == 1.0 and math.isnan(
        spike_metrics([1.0, float("inf")] * 11)["final_loss"])


def test_config_and_command():
    from assocmem.cli import main as cli

    assert DtStabilityConfig.quick().steps < DtStabilityConfig().steps
    with pytest.raises(SystemExit):
        cli(["experiment", "dt-stability", "--help"])
