"""Figures that read well at the probes' defaults: log axes with zeros, long titles, PCA strips."""
from __future__ import annotations

import numpy as np

from assocmem.probes.plotting import (MAX_PCA_COLUMNS, CurvePanel, PCAPanel, _set_scales, pca_grid, plt,
                                      save_curve_panels)


def _scale(series, logy=True, **kw) -> tuple[str, tuple[float, float]]:
    fig, ax = plt.subplots()
    panel = CurvePanel("t", "x", "y", series, logx=False, logy=logy, **kw)
    for x, y in series.values():
        ax.plot(x, y)
    _set_scales(ax, panel)
    scale, limits = ax.get_yscale(), ax.get_ylim()
    plt.close(fig)
    return scale, limits


def test_log_axis_with_zeros_is_symlog_and_all_zeros_linear():
    assert _scale({"a": ([0, 1, 2], [1e-3, 1e-1, 1.0])})[0] == "log"
    assert _scale({"a": ([0, 1, 2], [0.0, 1e-6, 1.0])})[0] == "symlog"  # zeros shown, not lifted by 1e-300
    assert _scale({"a": ([0, 1, 2], [0.0, 0.0, 0.0])})[0] == "linear"  # a causal model's leaks
    assert _scale({"a": ([0, 1], [0.2, 0.9])}, logy=False, ylim=(0, 1.02))[1] == (0, 1.02)  # accuracies


def test_pca_strip_is_reflowed_into_a_grid():
    panel = PCAPanel(np.zeros((4, 2)), "p")
    one_per_layer = [[panel, panel]] + [[panel] for _ in range(12)]  # layer 0 + control, then layers 1..12
    grid = pca_grid(one_per_layer)
    assert [len(r) for r in grid] == [MAX_PCA_COLUMNS, MAX_PCA_COLUMNS, 4]
    assert [len(r) for r in pca_grid([[panel] * 13])] == [5, 5, 3]
    square = [[panel] * 4 for _ in range(3)]  # layers x contexts stays as it is
    assert pca_grid(square) == square


def test_long_title_is_wrapped(tmp_path, monkeypatch):
    """The causality title (72 characters) no longer runs off its 4-inch axes."""
    closed = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: closed.append(fig) or close(fig))
    title = "max |Δ output| at position p when inputs after p change, for every target"
    save_curve_panels(tmp_path / "c.png", [CurvePanel(title, "x", "y", {"a": ([1, 2], [0.0, 0.0])}, logy=True)])
    shown = closed[0].axes[0].get_title()
    assert "\n" in shown and shown.replace("\n", " ") == title


def test_a_log_axis_holding_one_power_of_ten_gets_more_than_one_label():
    """State sizes 700..7400 (recall's vs-state panels): 1-2-5 ticks, not a lone 10³."""
    xs = [700, 1500, 4000, 7400]
    fig, ax = plt.subplots()
    ax.plot(xs, [0.1] * 4)
    _set_scales(ax, CurvePanel("t", "x", "y", {"a": (xs, [0.1] * 4)}, logx=True))
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    shown = [t.get_text() for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi]
    assert shown == ["1000", "2000", "5000"]
    plt.close(fig)


def test_a_log_axis_within_a_decade_labels_the_data_values_plainly():
    """K = 2, 4, 8 on a log axis: '2', '4', '8', not matplotlib's minor labels 2×10⁰, 3×10⁰, ..."""
    for xs, want in (([2, 4, 8], ["2", "4", "8"]), ([800, 1600, 2048, 4096], ["800", "1600", "2048", "4096"])):
        fig, ax = plt.subplots()
        panel = CurvePanel("t", "x", "y", {"a": (xs, [0.1] * len(xs))}, logx=True)
        ax.plot(xs, [0.1] * len(xs))
        _set_scales(ax, panel)
        fig.canvas.draw()
        assert [t.get_text() for t in ax.get_xticklabels()] == want
        assert all(t.get_text() == "" for t in ax.xaxis.get_minorticklabels())
        plt.close(fig)
    fig, ax = plt.subplots()  # over decades: decade ticks only, no minor labels
    xs = [4, 10, 100, 1200]
    _set_scales(ax, CurvePanel("t", "x", "y", {"a": (xs, [0.1] * 4)}, logx=True))
    ax.plot(xs, [0.1] * 4)
    fig.canvas.draw()
    assert [t.get_text() for t in ax.xaxis.get_minorticklabels() if t.get_text()] == []
    plt.close(fig)
