"""Layout shared by every PNG of the project: the panel grid, readable log axes, legends that hide
no data, and the writer. Training's curves.png, RL's curves.png, the probes' figures
(probes/plotting.py) and the experiments' figures all draw through these, so a rule is fixed once:

- ``grid_shape(n, unit)``: 1..N panels as a near-square grid (1 x n up to three panels), columns a
  multiple of ``unit`` so panels that belong together (one layer's contexts) stay side by side.
- ``log_axis(axis, values)``: a log axis labels at least three ticks inside the data's range
  (decades, else 1-2-5, else 1..9 per decade, else evenly spaced plain numbers for data within a
  few percent), as plain numbers, with unlabelled minor ticks at 1..9 per decade.
- ``place_legends(fig)``: each axes' legend where it covers no plotted point or line (matplotlib's
  "best" place when that is clear), otherwise outside the axes on the right.
- ``save_figure(fig, path)``: the PNG at 110 dpi with every legend and label inside the image.

Imported lazily (matplotlib is not needed to start a command).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402

MAX_COLUMNS = 5
MIN_LOG_LABELS = 3
MAX_LOG_LABELS = 8
MAX_MEASURED_TICKS = 12
ACCURACY_LIMITS = (-0.04, 1.04)  # an accuracy axis: 0 and 1 shown clear of the frame


def grid_shape(n: int, *, unit: int = 1, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels: one row up to three panels, otherwise about square
    (columns = ⌈√n⌉), columns a multiple of ``unit`` (ignored when ``unit > max_columns``), at most
    ``max_columns``. 4 -> 2 x 2, 5..6 -> 2 x 3, 7 with unit 2 -> 2 x 4, 27 with unit 2 -> 7 x 4."""
    if n < 1:
        raise ValueError(f"grid_shape: need at least one panel, got {n}")
    unit = unit if 1 <= unit <= max_columns else 1
    columns = n if n <= 3 else math.ceil(math.sqrt(n))
    columns = min(unit * math.ceil(columns / unit), unit * (max_columns // unit), unit * math.ceil(n / unit))
    return math.ceil(n / columns), columns


def panel_grid(n: int, *, unit: int = 1, size: tuple[float, float] = (4.0, 3.2)):
    """A figure with ``grid_shape(n, unit)`` axes of ``size`` inches each; returns (fig, the first
    ``n`` axes in reading order). The cells left over are switched off."""
    rows, columns = grid_shape(n, unit=unit)
    fig, axes = plt.subplots(rows, columns, figsize=(size[0] * columns, size[1] * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


# ---------------------------------------------------------------- log axes
def plain_number(value: float, _=None) -> str:
    """1024, 0.05, 4.2, 1e-06: whole numbers below 10⁷ in full, others to three significant digits."""
    if value == round(value) and 1 <= abs(value) < 1e7:
        return f"{int(round(value))}"
    return f"{value:.3g}"


class ReadableLogLocator(ticker.Locator):
    """Major ticks of a log axis, at least MIN_LOG_LABELS of them inside the view: the coarsest of
    decades, 1-2-5 and 1..9 per decade that gives that many (decades thinned to MAX_LOG_LABELS);
    a view within one step of 1..9 gets evenly spaced plain values (4.1, 4.2, 4.3)."""

    def __init__(self, base: float = 10.0):
        self.base = base

    def __call__(self):
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((float(vmin), float(vmax)))
        if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= 0:
            return np.array([])
        lo = max(lo, hi * 1e-300)
        first, last = math.floor(math.log(lo, self.base)), math.ceil(math.log(hi, self.base))
        decades = self.base ** np.arange(first, last + 1, dtype=float)
        inside = lambda t: t[(t >= lo * (1 - 1e-9)) & (t <= hi * (1 + 1e-9))]  # noqa: E731
        shown = inside(decades)
        if len(shown) > MAX_LOG_LABELS:
            step = math.ceil(len(shown) / MAX_LOG_LABELS)
            return shown[::step]
        if len(shown) >= MIN_LOG_LABELS or self.base != 10:
            return shown if len(shown) >= MIN_LOG_LABELS else self._even(lo, hi, shown)
        for subs in ((1.0, 2.0, 5.0), tuple(range(1, 10))):
            shown = inside(np.outer(decades, subs).ravel())
            if MIN_LOG_LABELS <= len(shown) <= 2 * MAX_LOG_LABELS:
                return shown
        return self._even(lo, hi, shown)

    @staticmethod
    def _even(lo: float, hi: float, shown: np.ndarray) -> np.ndarray:
        ticks = ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        ticks = ticks[(ticks > 0) & (ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
        return ticks if len(ticks) >= len(shown) else shown


def log_axis(axis, *, base: float = 10, values=None) -> None:
    """Make ``axis`` (ax.xaxis / ax.yaxis) a readable log axis: labels as plain numbers, at the
    measured ``values`` when there are 3..MAX_MEASURED_TICKS of them (context lengths 16..1024, k =
    1..16; every second or third one where more than five), otherwise at ReadableLogLocator's
    ticks; unlabelled minor ticks at 1..9 per decade (base 10)."""
    setter = axis.axes.set_xscale if axis is axis.axes.xaxis else axis.axes.set_yscale
    setter("log", base=base)
    measured = np.unique(np.asarray([] if values is None else values, dtype=float))
    measured = measured[np.isfinite(measured) & (measured > 0)]
    if MIN_LOG_LABELS <= measured.size <= MAX_MEASURED_TICKS:
        axis.set_major_locator(ticker.FixedLocator(measured[::math.ceil(measured.size / 5)]))
    else:
        axis.set_major_locator(ReadableLogLocator(base))
    axis.set_major_formatter(ticker.FuncFormatter(plain_number))
    axis.set_minor_locator(ticker.LogLocator(base=base, subs="auto", numticks=12) if base == 10
                           else ticker.NullLocator())
    axis.set_minor_formatter(ticker.NullFormatter())


def integer_axis(axis) -> None:
    """Whole-number ticks on ``axis`` (steps, rounds, epochs); a view narrower than one unit (one
    step logged) is widened to ±1 around it, so the lone point is not on a fractional axis."""
    axis.set_major_locator(ticker.MaxNLocator(integer=True, min_n_ticks=1))
    lo, hi = axis.get_view_interval()
    if np.isfinite(lo) and np.isfinite(hi) and hi - lo < 1:
        middle = round((lo + hi) / 2)
        limits = axis.axes.set_xlim if axis is axis.axes.xaxis else axis.axes.set_ylim
        limits(middle - 1, middle + 1)


# ---------------------------------------------------------------- legends
def data_points(ax, per_segment: int = 12) -> np.ndarray:
    """[P, 2] display coordinates of what ``ax`` plots: every line's vertices and points along its
    segments, and every scatter point (bands and images are not counted)."""
    points = []
    for line in ax.get_lines():
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(1)]
        if len(xy) > 1:
            t = np.linspace(0, 1, per_segment)[None, :, None]
            xy = (xy[:-1, None] * (1 - t) + xy[1:, None] * t).reshape(-1, 2)
        points.append(xy)
    for collection in ax.collections:
        if isinstance(collection, matplotlib.collections.PathCollection) and len(collection.get_offsets()):
            points.append(collection.get_offset_transform().transform(collection.get_offsets()))
    return np.concatenate(points) if points else np.zeros((0, 2))


def covers_data(ax, legend, renderer) -> bool:
    """Whether ``legend`` lies over any of ``ax``'s plotted points or lines (display coordinates)."""
    box = legend.get_window_extent(renderer)
    xy = data_points(ax)
    return bool(((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)).any())


def _legend_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.axison and ax.get_legend_handles_labels()[1]]


def place_legends(fig, *, fontsize: float = 7, layout=None) -> None:
    """Give every axes of ``fig`` with labelled artists a legend that covers no data: matplotlib's
    "best" place if that is clear, otherwise outside on the right of the axes. ``layout()`` (e.g.
    tight_layout) is run after placing, and the placement is checked again against the new layout."""
    layout = layout or (lambda: fig.tight_layout())
    for ax in _legend_axes(fig):
        ax.legend(fontsize=fontsize, loc="best")
    layout()
    for _ in range(2):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        moved = False
        for ax in _legend_axes(fig):
            legend = ax.get_legend()
            if legend is not None and legend.get_bbox_to_anchor() is ax.bbox and covers_data(ax, legend, renderer):
                ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
                moved = True
        if not moved:
            return
        layout()


def finish(fig, suptitle: str = "", *, legend_fontsize: float = 7) -> None:
    """Suptitle, legends placed (``place_legends``) and a tight layout that leaves room for both."""
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    rect = (0, 0, 1, 0.96) if suptitle else (0, 0, 1, 1)
    place_legends(fig, fontsize=legend_fontsize, layout=lambda: fig.tight_layout(rect=rect))


def save_figure(fig, path: str | Path, *, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (parent folders made; legends outside an axes kept in the image)
    and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.08)
    plt.close(fig)
    return path
