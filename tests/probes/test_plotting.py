"""The layout rules every figure shares (training/figures.py): the panel grid, readable log axes,
legends that cover no data, log axes with zeros, long titles."""
from __future__ import annotations

import numpy as np
import pytest
from figure_checks import check_figure, drawn, line_points, render  # noqa: F401

from assocmem.probes.plotting import CurvePanel, _set_scales, plt, save_curve_panels
from assocmem.training.figures import ReadableLogLocator, grid_shape, log_axis, place_legends


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


@pytest.mark.parametrize("n,unit,shape", [(1, 1, (1, 1)), (2, 1, (1, 2)), (3, 1, (1, 3)), (4, 1, (2, 2)),
                                          (5, 1, (2, 3)), (6, 1, (2, 3)), (7, 1, (3, 3)), (10, 1, (3, 4)),
                                          (13, 1, (4, 4)), (26, 1, (6, 5)), (7, 2, (2, 4)), (27, 2, (7, 4)),
                                          (3, 3, (1, 3)), (7, 3, (3, 3)), (12, 6, (3, 4))])
def test_grid_shape(n, unit, shape):
    """One row up to three panels, then about square; whole units (a layer's contexts) per row
    where a unit fits in five columns (a unit of 6 does not: plain reading order)."""
    rows, columns = grid_shape(n, unit=unit)
    assert (rows, columns) == shape
    assert rows * columns >= n and (rows - 1) * columns < n


def test_grid_shape_refuses_no_panels():
    with pytest.raises(ValueError, match="at least one panel"):
        grid_shape(0)


@pytest.mark.parametrize("lo,hi,want", [(4.12, 4.31, [4.15, 4.2, 4.25, 4.3]),  # a loss within 5 %
                                        (700, 7400, [1000, 2000, 5000]),  # one power of ten inside
                                        (0.03, 1.0, [0.05, 0.1, 0.2, 0.5, 1.0]),
                                        (1e-6, 1.0, [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]),
                                        (0.5, 0.9, [0.5, 0.6, 0.7, 0.8, 0.9])])
def test_readable_log_locator_labels_at_least_three_ticks(lo, hi, want):
    np.testing.assert_allclose(ReadableLogLocator().tick_values(lo, hi), want, rtol=1e-12)


def test_readable_log_locator_thins_many_decades():
    ticks = ReadableLogLocator().tick_values(1e-12, 10.0)
    assert 3 <= len(ticks) <= 8 and np.allclose(np.diff(np.log10(ticks)), 2)


def test_log_axis_labels_measured_values_plainly():
    """Context lengths 16..1024 (powers of two): every second one, as plain numbers."""
    fig, ax = plt.subplots()
    xs = [16, 32, 64, 128, 256, 512, 1024]
    ax.plot(xs, [0.1] * 7)
    log_axis(ax.xaxis, values=xs)
    render(fig)
    assert [t.get_text() for t in ax.get_xticklabels() if t.get_text()] == ["16", "64", "256", "1024"]
    assert all(t.get_text() == "" for t in ax.xaxis.get_minorticklabels())
    plt.close(fig)


def test_a_legend_over_a_curve_is_moved_outside_the_axes():
    """Curves filling every corner: no place inside is clear, so the legend goes to the right."""
    fig, ax = plt.subplots(figsize=(3, 2.5))
    x = np.linspace(0, 1, 50)
    for level in np.linspace(0, 1, 9):
        ax.plot(x, np.full_like(x, level), label=f"level {level:.2f}")
    ax.set(xlabel="x", ylabel="y")
    place_legends(fig)
    renderer = render(fig)
    box, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.x0 >= frame.x1  # outside, to the right
    check_figure(fig)
    plt.close(fig)


def test_check_figure_sees_a_legend_over_data():
    """The check itself: a legend forced onto the data fails it."""
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="diagonal")
    ax.set(xlabel="x", ylabel="y")
    ax.legend(loc="center")
    render(fig)
    assert len(line_points(ax)) == 3
    with pytest.raises(AssertionError, match="legend covers"):
        check_figure(fig)
    plt.close(fig)


def test_long_title_is_wrapped(tmp_path, drawn):  # noqa: F811
    """The causality title (72 characters) does not run off its 4-inch axes."""
    title = "max |Δ output| at position p when inputs after p change, for every target"
    save_curve_panels(tmp_path / "c.png", [CurvePanel(title, "x", "y", {"a": ([1, 2], [0.0, 0.0])}, logy=True)])
    shown = drawn[0].axes[0].get_title()
    assert "\n" in shown and shown.replace("\n", " ") == title
