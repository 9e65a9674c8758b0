"""Layout checks for a drawn matplotlib figure, used by the figure tests: labelled axes, legends
over no data, readable log axes, no overlapping texts. Written apart from training/figures.py (the
code under test) so the checks do not share its arithmetic."""
from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402


@pytest.fixture
def drawn(monkeypatch):
    """Keep the figures the code under test closes; yields the list (drawn, in order of closing)."""
    kept = []
    close = plt.close

    def keep(fig=None):
        if fig is not None and not isinstance(fig, str):
            kept.append(fig)
        return close(fig)

    monkeypatch.setattr(plt, "close", keep)
    yield kept


def render(fig):
    """Draw ``fig`` on an Agg canvas (a closed figure keeps only a bare canvas) and return its renderer."""
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def shown_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.axison]


def _boxes_overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def line_points(ax) -> np.ndarray:
    """Display coordinates of every plotted vertex and of the midpoints of every segment."""
    out = []
    for line in ax.get_lines():
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(1)]
        out.append(xy)
        if len(xy) > 1:
            out.append((xy[1:] + xy[:-1]) / 2)
    return np.concatenate(out) if out else np.zeros((0, 2))


def check_figure(fig, *, log_labels: int = 3) -> None:
    """Every visible axes labelled on both sides, tick labels that do not overlap, a legend that
    covers no plotted point, at least ``log_labels`` labelled ticks inside each log axis' view."""
    renderer = render(fig)
    for ax in shown_axes(fig):
        is_key = ax.get_label() == "<colorbar>"
        assert ax.get_ylabel().strip(), f"axes {ax.get_title()!r}: no y label"
        if not is_key:
            assert ax.get_xlabel().strip(), f"axes {ax.get_title()!r}: no x label"
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()
                      and min(lo, hi) <= t.get_position()[axis is ax.yaxis] <= max(lo, hi)]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for a, b in itertools.combinations(boxes, 2):
                assert not _boxes_overlap(a, b), f"axes {ax.get_title()!r}: tick labels overlap"
            if axis.get_scale() == "log":
                assert len(labels) >= log_labels, (f"axes {ax.get_title()!r}: {len(labels)} labelled ticks "
                                                   f"on a log axis: {[t.get_text() for t in labels]}")
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            xy = line_points(ax)
            inside = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
            assert not inside.any(), f"axes {ax.get_title()!r}: the legend covers {int(inside.sum())} data points"


def texts_overlap(texts, renderer) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for (a, x), (b, y) in itertools.combinations(boxes, 2) if _boxes_overlap(x, y)]
