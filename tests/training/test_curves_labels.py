"""curves.png of training and of RL, rendered with edge-case logs (one step, a loss within 5 %,
losses over two decades) and checked programmatically (tests/figure_checks.py): at least three
labelled ticks on the loss axis, as plain numbers, legends over no curve, labelled axes."""
from __future__ import annotations

import json

import numpy as np
import pytest
from figure_checks import check_figure, drawn  # noqa: F401

from assocmem.training.rl.curves import plot_rl_curves
from assocmem.training.runlog import plot_curves

LOSSES = {"flat": [4.31, 4.22, 4.18, 4.15, 4.12], "decades": list(4.5 * np.exp(-np.arange(60) / 12)),
          "one-step": [2.3]}


def _log(folder, records) -> None:
    folder.mkdir()
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("name", LOSSES)
def test_training_curves(tmp_path, drawn, name):  # noqa: F811
    losses = LOSSES[name]
    records = [{"split": "train", "step": 10 * i, "loss": v, "accuracy": 1 - v / 5} for i, v in enumerate(losses)]
    records += [{"split": "eval", "step": 10 * i, "loss": 1.1 * v, "accuracy": 0.0} for i, v in enumerate(losses)
                if i % 5 == 0]
    _log(tmp_path / "run", records)
    assert plot_curves(tmp_path / "run").is_file()
    fig, = drawn
    check_figure(fig)
    loss = fig.axes[0]
    lo, hi = loss.get_ylim()
    labels = [t.get_text() for t in loss.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]
    assert len(labels) >= 3 and all("$" not in t and "times" not in t for t in labels)
    assert loss.get_ylabel() == "loss (nats per supervised token)"
    if name == "one-step":
        assert all(line.get_marker() == "o" for line in loss.get_lines())


@pytest.mark.parametrize("rounds", [1, 30])
def test_rl_curves(tmp_path, drawn, rounds):  # noqa: F811
    records = [{"split": "train", "step": i, "reward": 0.2, "pass@1": 0.1, "g_neg_over_g_pos": None if i == 0 else 1.1,
                "kl": 0.001 * i, "length": 30 + i} for i in range(rounds)]
    records += [{"split": "eval", "step": i, "pass@1": 0.1} for i in range(0, rounds, 10)]
    _log(tmp_path / "rl", records)
    plot_rl_curves(tmp_path / "rl")
    fig, = drawn
    check_figure(fig)
    assert [ax.get_ylabel() for ax in fig.axes][3] == "response length (tokens)"
    assert all(float(t.get_text().replace("−", "-")).is_integer() for t in fig.axes[0].get_xticklabels()
               if t.get_text())
