"""Matplotlib figures for the probes (PNG files, Agg backend, no display needed).

Three kinds of figure, laid out by the project's one set of rules (training/figures.py: the panel
grid for 1..N panels, readable log axes, legends that cover no data):
- PCA panels: node coordinates in PC1-PC2 drawn with the graph's edges
  (Park et al. 2025, Fig. 1 style), axes labelled with each PC's share of the variance, nodes
  coloured by index with one colour key, node labels placed where they overlap nothing.
- Curve panels: one or more axes, each with named series y(x) and optional shaded intervals; log
  x by default (energy/accuracy against context length; Zoology's recall-vs-state figure;
  accuracy against k samples).
- Heat maps: a value per (row, column) cell with the numbers written in, an optional vertical
  marker between columns (NIAH: accuracy over depth × context length with the training length marked).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import networkx as nx
import numpy as np

from ..training.figures import (ACCURACY_LIMITS, finish, grid_shape, integer_axis, log_axis, panel_grid,  # noqa: F401
                                plain_number, plt, save_figure)

NODE_LABEL_OFFSETS = ((5, 4), (-5, 4), (5, -4), (-5, -4), (0, 7), (0, -7))  # points from the node, tried in order


@dataclass
class PCAPanel:
    """One PCA panel: coords [N, 2] (NaN rows = node absent), a title, and the share of the
    variance PC1 and PC2 explain (None: not known)."""

    coords: np.ndarray
    title: str
    explained: tuple[float, float] | None = None


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
    ylim: tuple[float, float] | None = None  # e.g. ACCURACY_LIMITS


# ---------------------------------------------------------------- PCA panels
def _pc_label(k: int, explained: tuple[float, float] | None) -> str:
    share = f" ({100 * explained[k - 1]:.0f} % of variance)" if explained is not None else ""
    return f"PC{k}{share}"


def _draw_pca(ax, panel: PCAPanel, graph: nx.Graph, norm) -> None:
    xy = np.asarray(panel.coords, dtype=float)
    for i, j in graph.edges:
        if np.isfinite(xy[[i, j]]).all():
            ax.plot(xy[[i, j], 0], xy[[i, j], 1], color="0.65", lw=0.8, zorder=1)
    ok = np.isfinite(xy).all(1)
    ax.scatter(xy[ok, 0], xy[ok, 1], c=np.arange(len(xy))[ok], cmap="viridis", norm=norm, s=36, zorder=2,
               edgecolors="k", lw=0.4)
    ax.set_title(panel.title, fontsize=8)
    ax.set_xlabel(_pc_label(1, panel.explained), fontsize=7)
    ax.set_ylabel(_pc_label(2, panel.explained), fontsize=7)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_aspect("equal", adjustable="datalim")
    ax.margins(0.12)


def _overlaps(box, boxes) -> bool:
    return any(box.overlaps(b) for b in boxes)


def label_nodes(ax, coords: np.ndarray, renderer, *, fontsize: float = 6.5) -> list:
    """Write each node's index beside its marker at the first offset (NODE_LABEL_OFFSETS) where the
    label overlaps no other label and no marker and stays inside the axes; a node with no such
    place keeps its marker unlabelled. Returns the texts written. Run once the layout is final."""
    xy = np.asarray(coords, dtype=float)
    ok = np.flatnonzero(np.isfinite(xy).all(1))
    points = ax.transData.transform(xy[ok]) if len(ok) else np.zeros((0, 2))
    radius = 3.5 * renderer.points_to_pixels(1.0)
    markers = [matplotlib.transforms.Bbox.from_extents(x - radius, y - radius, x + radius, y + radius)
               for x, y in points]
    frame, placed, texts = ax.get_window_extent(renderer), [], []
    for i in ok:
        for dx, dy in NODE_LABEL_OFFSETS:
            text = ax.annotate(str(i), xy[i], xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                               ha="left" if dx > 0 else "right" if dx < 0 else "center",
                               va="bottom" if dy > 0 else "top", zorder=3)
            box = text.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not _overlaps(box, placed) and not _overlaps(box, markers):
                placed.append(box)
                texts.append(text)
                break
            text.remove()
    return texts


def save_pca_panels(path: str | Path, rows: list[list[PCAPanel]], graph: nx.Graph, suptitle: str = "") -> Path:
    """Write PCA panels with the graph's edges to ``path``: ``rows`` in reading order (e.g. one row
    of contexts per layer, then the control) on a near-square grid whose columns hold whole rows
    where they fit (training/figures.grid_shape with unit = the first row's length), one colour key
    for the node index, node labels where they overlap nothing."""
    panels = [p for row in rows for p in row]
    if not panels:
        raise ValueError("rows: need at least one PCA panel")
    fig, axes = panel_grid(len(panels), unit=len(rows[0]) or 1, size=(2.5, 2.5))
    n = max(len(p.coords) for p in panels)
    norm = matplotlib.colors.Normalize(vmin=0, vmax=max(n - 1, 1))
    for ax, panel in zip(axes, panels):
        _draw_pca(ax, panel, graph, norm)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.set_layout_engine("constrained")
    key = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap="viridis"), ax=fig.axes, shrink=0.8,
                       aspect=30, pad=0.02)
    key.set_label("node index (colour)", fontsize=8)
    key.ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    fig.canvas.draw()
    fig.set_layout_engine("none")  # the layout is final: labels are placed against it
    renderer = fig.canvas.get_renderer()
    for ax, panel in zip(axes, panels):
        label_nodes(ax, panel.coords, renderer)
    return save_figure(fig, path)


# ---------------------------------------------------------------- curve panels
def save_curve_panels(path: str | Path, panels: list[CurvePanel], suptitle: str = "", ncols: int | None = None) -> Path:
    """Write one axes per CurvePanel (markers + lines) to ``path``, on grid_shape's grid (or
    ``ncols`` columns), each legend where it covers no curve."""
    if not panels:
        raise ValueError("panels: need at least one panel")
    if ncols:
        rows, columns = -(-len(panels) // ncols), ncols
        fig, grid = plt.subplots(rows, columns, figsize=(4.0 * columns, 3.2 * rows), squeeze=False)
        axes = list(grid.flat)
        for ax in axes[len(panels):]:
            ax.axis("off")
    else:
        fig, axes = panel_grid(len(panels))
    for ax, panel in zip(axes, panels):
        for label, (x, y) in panel.series.items():
            line, = ax.plot(x, y, marker="o", ms=4, lw=1.2, label=label, clip_on=False, zorder=3)
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
        ax.grid(alpha=0.12, which="minor")
    finish(fig, suptitle, legend_fontsize=6.5)
    return save_figure(fig, path)


def _values(panel: CurvePanel, k: int) -> np.ndarray:
    return np.asarray([v for series in panel.series.values() for v in series[k]], dtype=float)


def _set_scales(ax, panel: CurvePanel) -> None:
    """Log axes where asked (training/figures.log_axis: at least three labelled ticks, a log x at
    the measured values where they are few and every series shares them). A log y axis over values that
    include zeros becomes symlog, linear below the smallest positive value; all zeros stay on a
    linear axis (a log axis cannot show them)."""
    ys, xs = _values(panel, 1), _values(panel, 0)
    if panel.logx:
        grids = {tuple(x) for x, _ in panel.series.values()}  # the measured values label the axis when shared
        log_axis(ax.xaxis, base=panel.logx_base, values=xs if len(grids) == 1 else None)
    if panel.logy:
        positive = ys[np.isfinite(ys) & (ys > 0)]
        if positive.size == 0:
            ax.set_yscale("linear")
        elif positive.size < np.isfinite(ys).sum():
            ax.set_yscale("symlog", linthresh=float(positive.min()))
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(plain_number))
        else:
            log_axis(ax.yaxis)
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)


def save_heatmap(path: str | Path, values: np.ndarray, *, rows: list[str], columns: list[str], title: str,
                 xlabel: str, ylabel: str, marker_after: float | None = None, marker_label: str = "",
                 vmin: float = 0.0, vmax: float = 1.0, value_label: str = "accuracy (fraction correct)") -> Path:
    """Write a heat map of ``values`` [len(rows), len(columns)] with each cell's value written in
    and a colour key labelled ``value_label``; ``marker_after`` (a fractional column index) draws a
    dashed vertical line there, its legend below the axes (covering no cell)."""
    data = np.asarray(values, dtype=float)
    if data.shape != (len(rows), len(columns)):
        raise ValueError(f"values has shape {data.shape}, expected ({len(rows)}, {len(columns)})")
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 + 0.8 * len(columns)), max(2.8, 1.4 + 0.5 * len(rows))),
                           layout="constrained")
    image = ax.imshow(data, cmap="RdYlGn", vmin=vmin, vmax=vmax, aspect="auto", origin="upper")
    for (r, c), v in np.ndenumerate(data):
        ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(columns)), columns, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    if marker_after is not None:
        ax.axvline(marker_after, color="k", ls="--", lw=1.2, label=marker_label or None)
        if marker_label:
            fig.legend(fontsize=7, loc="outside lower center", frameon=False)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(textwrap.fill(title, 60), fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).set_label(value_label, fontsize=8)
    return save_figure(fig, path)
