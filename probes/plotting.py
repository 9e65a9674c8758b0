"""Matplotlib figures for the probes (PNG files, Agg backend, no display needed).

Three kinds of figure:
- PCA panels: node coordinates in PC1-PC2 drawn with the graph's edges
  (Park et al. 2025, Fig. 1 style), a grid of panels (rows x columns).
- Curve panels: one or more axes, each with named series y(x) and optional
  shaded intervals; log x by default (energy/accuracy against context length;
  Zoology's recall-vs-state figure; accuracy against k samples).
- Heat maps: a value per (row, column) cell with the numbers written in, an
  optional vertical marker between columns (NIAH: accuracy over depth ×
  context length with the training length marked).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogLocator  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402


MAX_PCA_COLUMNS = 5


@dataclass
class PCAPanel:
    """One PCA panel: coords [N, 2] (NaN rows = node absent), a title."""

    coords: np.ndarray
    title: str


@dataclass
class CurvePanel:
    """One axes of curves: series maps a label to (x values, y values)."""

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    logx: bool = True
    logy: bool = False
    hline: float | None = None  # e.g. chance level, drawn dashed
    hline_label: str = ""
    bands: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)  # label -> (low, high)
    logx_base: int = 10
    ylim: tuple[float, float] | None = None  # e.g. (0, 1) for an accuracy


def _draw_pca(ax, panel: PCAPanel, graph: nx.Graph) -> None:
    xy = np.asarray(panel.coords, dtype=float)
    for i, j in graph.edges:
        if np.isfinite(xy[[i, j]]).all():
            ax.plot(xy[[i, j], 0], xy[[i, j], 1], color="0.6", lw=0.8, zorder=1)
    ok = np.isfinite(xy).all(1)
    colors = np.arange(len(xy))
    ax.scatter(xy[ok, 0], xy[ok, 1], c=colors[ok], cmap="viridis", s=40, zorder=2, edgecolors="k", lw=0.4)
    fills = matplotlib.colormaps["viridis"](colors / max(len(xy) - 1, 1))  # the nodes' colours, [N, 4]
    for i in np.flatnonzero(ok):  # dark labels on the light end of viridis, white on the dark end
        light = fills[i, :3] @ np.array([0.299, 0.587, 0.114]) > 0.5
        ax.annotate(str(i), xy[i], fontsize=6, ha="center", va="center", color="k" if light else "w", zorder=3)
    ax.set_title(panel.title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_aspect("equal", adjustable="datalim")


def pca_grid(rows: list[list[PCAPanel]]) -> list[list[PCAPanel]]:
    """The rows to draw: as given, or reflowed into rows of MAX_PCA_COLUMNS if they form a strip."""
    panels = [p for row in rows for p in row]
    if len(panels) > MAX_PCA_COLUMNS and (len(rows) == 1 or max(len(r) for r in rows) <= 2):
        return [panels[i:i + MAX_PCA_COLUMNS] for i in range(0, len(panels), MAX_PCA_COLUMNS)]
    return rows


def save_pca_panels(path: str | Path, rows: list[list[PCAPanel]], graph: nx.Graph, suptitle: str = "") -> Path:
    """Write a grid of PCA panels (rows x max columns) with the graph's edges to ``path``. A grid
    that would be a strip (one row, or rows of one or two panels, e.g. one context per layer) is
    reflowed in reading order into rows of MAX_PCA_COLUMNS (13 panels: 3 rows of 5)."""
    if not rows or not any(rows):
        raise ValueError("rows: need at least one PCA panel")
    rows = pca_grid(rows)
    ncols = max(len(r) for r in rows)
    fig, axes = plt.subplots(len(rows), ncols, figsize=(2.2 * ncols, 2.3 * len(rows)), squeeze=False)
    for r, row in enumerate(rows):
        for c in range(ncols):
            if c < len(row):
                _draw_pca(axes[r][c], row[c], graph)
            else:
                axes[r][c].axis("off")
    _finish(fig, suptitle)
    return save_figure(fig, path)


def save_curve_panels(path: str | Path, panels: list[CurvePanel], suptitle: str = "", ncols: int | None = None) -> Path:
    """Write one axes per CurvePanel (markers + lines) to ``path``."""
    if not panels:
        raise ValueError("panels: need at least one panel")
    ncols = ncols or min(len(panels), 3)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.2 * nrows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for label, (x, y) in panel.series.items():
            line, = ax.plot(x, y, marker="o", ms=3, lw=1.2, label=label)
            if label in panel.bands:
                low, high = panel.bands[label]
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)
        if panel.hline is not None:
            ax.axhline(panel.hline, ls="--", color="0.5", lw=0.8, label=panel.hline_label or None)
        _set_scales(ax, panel)
        ax.set_title(textwrap.fill(panel.title, 48), fontsize=9)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        if panel.series:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    _finish(fig, suptitle)
    return save_figure(fig, path)


def _set_scales(ax, panel: CurvePanel) -> None:
    """Log axes where asked, with at most ~6 labelled decades (no overlapping tick labels). A log y
    axis over values that include zeros becomes symlog, linear below the smallest positive value;
    all zeros stay on a linear axis (a log axis cannot show them)."""
    ys = np.asarray([v for _, y in panel.series.values() for v in y], dtype=float)
    xs = np.asarray([v for x, _ in panel.series.values() for v in x], dtype=float)
    if panel.logx:
        ax.set_xscale("log", base=panel.logx_base)
        if panel.logx_base != 10:  # plain numbers (1, 2, 4, ...) rather than powers
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        else:
            _log_ticks(ax.xaxis, xs)
    if panel.logy:
        positive = ys[np.isfinite(ys) & (ys > 0)]
        if positive.size == 0:
            ax.set_yscale("linear")
        elif positive.size < np.isfinite(ys).sum():
            ax.set_yscale("symlog", linthresh=float(positive.min()))
        else:
            ax.set_yscale("log")
            _log_ticks(ax.yaxis, positive)
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)


def _log_ticks(axis, values: np.ndarray) -> None:
    """Labels of a base-10 log axis: over less than a decade (where matplotlib would label minor
    ticks as 2×10⁰, 3×10⁰, ...) the distinct data values, at most 8, as plain numbers; over data
    that hold at most one power of ten (one labelled tick otherwise) 1-2-5 ticks as plain numbers;
    otherwise at most ~6 labelled decades. No minor labels."""
    positive = np.unique(values[np.isfinite(values) & (values > 0)])
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    if positive.size and positive.max() / positive.min() < 10 and positive.size <= 8:
        axis.set_major_locator(matplotlib.ticker.FixedLocator(positive))
        axis.set_major_formatter(plain)
    elif positive.size and np.floor(np.log10(positive.max())) - np.ceil(np.log10(positive.min())) < 1:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
    else:
        axis.set_major_locator(LogLocator(base=10, numticks=6))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _finish(fig, suptitle: str) -> None:
    """Tight layout, leaving room for the suptitle above the panels."""
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96) if suptitle else (0, 0, 1, 1))


def save_heatmap(path: str | Path, values: np.ndarray, *, rows: list[str], columns: list[str], title: str,
                 xlabel: str, ylabel: str, marker_after: float | None = None, marker_label: str = "",
                 vmin: float = 0.0, vmax: float = 1.0) -> Path:
    """Write a heat map of ``values`` [len(rows), len(columns)] with each cell's value written in;
    ``marker_after`` (a fractional column index) draws a dashed vertical line there."""
    data = np.asarray(values, dtype=float)
    if data.shape != (len(rows), len(columns)):
        raise ValueError(f"values has shape {data.shape}, expected ({len(rows)}, {len(columns)})")
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(columns), 1.0 + 0.5 * len(rows)))
    image = ax.imshow(data, cmap="RdYlGn", vmin=vmin, vmax=vmax, aspect="auto", origin="upper")
    for (r, c), v in np.ndenumerate(data):
        ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(columns)), columns, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    if marker_after is not None:
        ax.axvline(marker_after, color="k", ls="--", lw=1.2, label=marker_label or None)
        if marker_label:
            ax.legend(fontsize=6, loc="upper right")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (110 dpi, parent folders made) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
