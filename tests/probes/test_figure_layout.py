"""Every figure the probes and experiments draw, rendered with edge-case data (one model, one
point, zeros, many panels) and checked programmatically (tests/figure_checks.py): labelled axes,
legends over no data, at least three labels on every log axis, node labels that overlap nothing."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from figure_checks import check_figure, drawn, render, texts_overlap  # noqa: F401

from assocmem.probes.graph_tracing import GraphTracingResult, save_graph_tracing_figures
from assocmem.probes.niah import save_niah_figure
from assocmem.probes.plotting import CurvePanel, PCAPanel, save_curve_panels, save_pca_panels
from assocmem.probes.recall import RecallPoint, save_recall_figures
from assocmem.probes.sounding import Sounding, save_sounding_figure
from assocmem.probes.test_time_scaling import PLOTTED, save_equal_compute_figure, save_tts_figure

GRID = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 4))


def _tracing(layers: int, contexts: list[int], *, zeros: bool = False, seed: int = 0) -> GraphTracingResult:
    rng = np.random.default_rng(seed)
    grid = np.array([[i % 4, i // 4] for i in range(16)], dtype=float)
    pca_cs = sorted({contexts[0], contexts[-1]})
    pca = {(l, c): grid + rng.normal(0, 0.4 * (1 + l), grid.shape) for l in range(layers) for c in pca_cs}
    energy = np.zeros((layers, len(contexts))) if zeros else np.array(
        [[(l + 1) * 0.7 ** np.log2(c) for c in contexts] for l in range(layers)])
    return GraphTracingResult(
        graph_kind="grid", num_nodes=16, node_tokens=list(range(16)), context_lengths=contexts, window=16,
        pca_window=16, energy=energy, energy_ratio=np.clip(2 * energy, 0, 1.2),
        accuracy=np.linspace(0.0, 1.0, len(contexts)), accuracy_full=np.linspace(0.0, 0.8, len(contexts)),
        chance=0.2, pca=pca, pca_explained={k: [0.41, 0.22] for k in pca},
        control={"mixed_pca": grid, "mixed_energy": 0.3, "mixed_energy_ratio": 0.5, "mixed_pca_explained": [0.5, 0.4]})


@pytest.mark.parametrize("layers,contexts,zeros", [(3, [16, 32, 64, 128, 256, 512, 1024], False),
                                                   (1, [32], False), (2, [16, 32, 64], True),
                                                   (13, [16, 64, 256, 1024], False)],
                         ids=["typical", "one-point", "zeros", "13-layers"])
def test_graph_tracing_figures(tmp_path, drawn, layers, contexts, zeros):  # noqa: F811
    save_graph_tracing_figures(_tracing(layers, contexts, zeros=zeros), GRID, tmp_path, title="t")
    pca, curves = drawn
    for fig in drawn:
        check_figure(fig)
    panels = [ax for ax in pca.axes if ax.axison and ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 * layers + 1 if len(contexts) > 1 else layers + 1
    assert panels[0].get_xlabel() == "PC1 (41 % of variance)" and panels[0].get_ylabel() == "PC2 (22 % of variance)"
    key = [ax for ax in pca.axes if ax.get_label() == "<colorbar>"]
    assert len(key) == 1 and key[0].get_ylabel() == "node index (colour)"
    rows = {round(ax.get_position().y0, 3) for ax in panels}
    columns = {round(ax.get_position().x0, 3) for ax in panels}
    assert len(columns) <= 5 and len(rows) <= len(columns) + 3  # about square, not a strip
    renderer = render(pca)
    for ax in panels:
        assert texts_overlap(ax.texts, renderer) == []
        assert len(ax.texts) >= 8  # most of the 16 nodes keep their label
    energy = curves.axes[0]
    if not zeros and len(contexts) > 1:
        assert energy.get_yscale() == "log"


def test_pca_labels_of_crowded_nodes_are_dropped_not_stacked(tmp_path, drawn):  # noqa: F811
    """Sixteen nodes within a hundredth of each other: a few labels, none on another."""
    coords = np.random.default_rng(1).normal(0, 0.01, (16, 2))
    save_pca_panels(tmp_path / "p.png", [[PCAPanel(coords, "crowded", (0.9, 0.1))]], GRID)
    fig, = drawn
    ax = fig.axes[0]
    assert 1 <= len(ax.texts) < 16
    assert texts_overlap(ax.texts, render(fig)) == []


def _points(models: int, settings: int, sizes: int, accuracy=None) -> list[RecallPoint]:
    return [RecallPoint(f"m{m}-{s}", f"m{m}", 700 * 2 ** s, 64 * 2 ** k, 4 * 2 ** k,
                        accuracy if accuracy is not None else min(1.0, 0.2 * m + 0.1 * s + 0.05 * k))
            for m in range(models) for s in range(sizes) for k in range(settings)]


@pytest.mark.parametrize("points", [_points(1, 1, 1), _points(1, 3, 1), _points(1, 1, 1, accuracy=0.0),
                                    _points(4, 4, 3), _points(2, 1, 2, accuracy=1.0)],
                         ids=["one-point", "one-model", "zero", "many", "all-one"])
def test_recall_figures(tmp_path, drawn, points):  # noqa: F811
    save_recall_figures(points, tmp_path)
    for fig in drawn:
        check_figure(fig)
        for ax in fig.axes:
            lo, hi = ax.get_ylim()
            assert lo < 0 and hi > 1  # 0 and 1 drawn clear of the frame
            assert all(line.get_marker() == "o" and line.get_markersize() >= 4 for line in ax.get_lines())
    state = drawn[0]
    if max(len({p.state_size for p in points if p.mixer == m}) for m in {p.mixer for p in points}) == 1:
        assert len([ax for ax in state.axes if ax.axison]) == 1  # one panel, not a grid of single dots


@pytest.mark.parametrize("ks", [[1], [1, 2, 4, 8, 16]], ids=["one-k", "k-1-16"])
def test_tts_figure(tmp_path, drawn, ks):  # noqa: F811
    metrics = {m: {"k": ks, "mean": [0.1 * i] * len(ks), "low": [0.0] * len(ks), "high": [0.2 * i] * len(ks)}
               for i, m in enumerate(PLOTTED)}
    save_tts_figure({"metrics": metrics, "num_problems": 3, "settings": {"num_samples": ks[-1]}, "rule": "majority"},
                    tmp_path / "tts.png")
    check_figure(drawn[0], log_labels=min(3, len(ks)))


@pytest.mark.parametrize("rounds", [0, 3])
def test_equal_compute_figure(tmp_path, drawn, rounds):  # noqa: F811
    """Parallel metrics at k samples and the sequential rounds against tokens per problem; one round:
    one point per series."""
    ks = [1, 2, 4, 8]
    parallel = {"tokens": [12.0 * k for k in ks],
                "metrics": {"pass@k": {"mean": [0.2, 0.3, 0.45, 0.6]}, "maj@k (random k)": {"mean": [0.2] * 4}}}
    sequential = {"check": "self", "rounds": list(range(rounds + 1)), "tokens": [15.0 * (r + 1) for r in range(rounds + 1)],
                  "accuracy": [0.2 + 0.05 * r for r in range(rounds + 1)]}
    save_equal_compute_figure(parallel, sequential, tmp_path / "e.png")
    check_figure(drawn[0])


@pytest.mark.parametrize("shape", [(1, 1), (5, 6)])
def test_niah_heatmap(tmp_path, drawn, shape):  # noqa: F811
    depths, lengths = shape
    report = {"lengths": [64 * 2 ** i for i in range(lengths)], "train_length": 64, "flags": {},
              "depths": list(np.linspace(0, 1, depths)), "accuracy": np.zeros(shape).tolist(), "chance": 0.1, "trials": 1}
    save_niah_figure(report, tmp_path / "niah.png")
    fig, = drawn
    check_figure(fig)
    heat = fig.axes[0]
    legend = fig.legends[0].get_window_extent(render(fig))
    assert legend.y1 <= heat.get_window_extent().y0  # the training-length key lies below the cells


@pytest.mark.parametrize("n", [1, 5])
def test_sounding_figure(tmp_path, drawn, n):  # noqa: F811
    rng = np.random.default_rng(0)
    results = [Sounding(f"layers.{i}.w", [8, 8], 0, 8, 2, "abs2", 0.9 - 0.1 * i, 0.2, [1, 2], 1,
                        list(rng.random(5) + 1e-3)) for i in range(n)]
    save_sounding_figure(results, tmp_path / "s.png", threshold=0.5)
    check_figure(drawn[0])


@pytest.mark.parametrize("series", [{"causal": (list(range(32)), [0.0] * 32)},
                                    {"leaks": (list(range(32)), [0.0] * 16 + list(np.logspace(-7, -1, 16)))},
                                    {"a": ([1.0], [0.5])}], ids=["zeros", "zeros-then-leak", "one-point"])
def test_curve_panels_log_y(tmp_path, drawn, series):  # noqa: F811
    save_curve_panels(tmp_path / "c.png", [CurvePanel("leak", "position (token)", "leak", series, logx=False, logy=True)])
    check_figure(drawn[0])


def test_curve_panels_many_panels_make_a_grid(tmp_path, drawn):  # noqa: F811
    panels = [CurvePanel(f"p{i}", "pairs N", "relative MSE", {"a": ([1, 2, 4, 8], [1e-3, 1e-2, 0.1, 1.0])}, logy=True)
              for i in range(7)]
    save_curve_panels(tmp_path / "c.png", panels)
    fig, = drawn
    check_figure(fig)
    shown = [ax for ax in fig.axes if ax.axison]
    assert len(shown) == 7 and len({round(ax.get_position().x0, 3) for ax in shown}) == 3  # 3 x 3, two cells off


def test_experiment_figures(tmp_path, drawn):  # noqa: F811
    from assocmem.probes.experiments import grokking, leak, rl

    grokking.save_curves([{"p": 97, "variant": v, "val_curve": [(e, min(1.0, e / 100)) for e in range(0, 200, 10)]}
                          for v in list(grokking.VARIANTS)[:2]], tmp_path / "g.png")
    leak.save_curves([{"model": m, "bpc_curve": [(1, 4.0)], "control_curve": [(1, 3.0, 5.0)]} for m in leak.MODELS],
                     tmp_path / "l.png")

    class Config:
        methods = ["grpo", "balanced"]

    rl.save_figure({0: {m: {"ratio": [None], "reward": [0.5], "eval": [(0, 0.0)]} for m in Config.methods}}, Config,
                   tmp_path / "r.png")
    assert len(drawn) == 3
    for fig in drawn:
        check_figure(fig, log_labels=1)
