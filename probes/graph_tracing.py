"""In-context graph tracing (Park et al. 2025, "ICLR: In-Context Learning of
Representations"; thesis §4.3.1).

Each node of a graph (4×4 grid, ring of 10, hexagonal lattice) is a token with no
relation to the graph; a model reads random walks on the graph. We measure, against
context length c (the number of tokens read):

1. Representations: for every layer ℓ (the residual stream after block ℓ, i.e.
   ``hidden_states[ℓ]`` of an HF causal LM called with ``output_hidden_states=True``;
   index 0 is the embeddings; assocmem models return the last entry before the final
   norm, transformers models mostly after it), the class mean of each node's token over the
   trailing window of positions [c − W, c) pooled across a batch of walks:
   H^ℓ(c) ∈ R^{N×d}. Its Dirichlet energy (probes/energy.py; ``energy``: park = Park et
   al.'s Σ A_ij ‖x_i − x_j‖², the default, or normalised = ÷ 2d‖X‖²_F) and energy ratio
   (the same for both), and at chosen c its PCA (PC1–PC2) drawn with the graph's edges.
2. Accuracy: at each position, the probability mass the next-token distribution
   puts on the valid neighbours of the current node, (a) with the softmax
   restricted to the N graph tokens and (b) over the full vocabulary; averaged
   over the walks and the positions of the same trailing window.
3. Control: random node vectors after one round of neighbour mixing (X + A X);
   their energy and PCA sit beside the model's (a graph-shaped PCA alone is not
   evidence of in-context learning).

Works on any model called as ``model(input_ids=..., output_hidden_states=True)``
returning ``.logits`` and ``.hidden_states`` (assocmem models, transformers LMs).
The model is causal, so ONE forward over the full walks gives every context length.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import networkx as nx
import numpy as np
import torch

from assocmem.training.graphs import random_walk

from .energy import (ENERGIES, ENERGY_LABELS, ENERGY_UNITS, Energy, adjacency, dirichlet_energy, energy_ratio,
                     neighbour_mixing_control, pca_2d)
from .io import check_length
from .plotting import ACCURACY_LIMITS, CurvePanel, PCAPanel, save_curve_panels, save_pca_panels


@dataclass
class GraphTracingResult:
    """Everything the probe measured; ``to_json()`` gives plain lists.

    energy, energy_ratio: [L+1, C] per layer (row 0 = embeddings) and context length; ``energy_definition``
    names the energy (probes/energy.py ``ENERGIES``).
    accuracy, accuracy_full: [C] neighbour mass (softmax over graph tokens / full vocabulary).
    pca[(layer, c)]: coords [N, 2] (NaN rows = node absent in the window).
    """

    graph_kind: str
    num_nodes: int
    node_tokens: list[int]
    context_lengths: list[int]
    window: int
    pca_window: int
    energy: np.ndarray
    energy_ratio: np.ndarray
    accuracy: np.ndarray
    accuracy_full: np.ndarray
    chance: float
    pca: dict[tuple[int, int], np.ndarray]
    pca_explained: dict[tuple[int, int], list[float]]
    control: dict = field(default_factory=dict)
    nodes_present: list[int] = field(default_factory=list)  # [C] nodes seen in each energy window
    energy_definition: str = "park"

    @property
    def num_layers(self) -> int:
        return self.energy.shape[0]

    def to_json(self) -> dict:
        def nan_to_none(a) -> list:
            return [[None if not np.isfinite(x) else float(x) for x in row] for row in np.atleast_2d(a)]

        return {
            "graph": self.graph_kind, "num_nodes": self.num_nodes, "node_tokens": self.node_tokens,
            "context_lengths": self.context_lengths, "window": self.window, "pca_window": self.pca_window,
            "energy_definition": self.energy_definition,
            "energy": nan_to_none(self.energy), "energy_ratio": nan_to_none(self.energy_ratio),
            "accuracy": nan_to_none(self.accuracy)[0], "accuracy_full": nan_to_none(self.accuracy_full)[0],
            "chance": self.chance, "nodes_present": self.nodes_present,
            "pca": [{"layer": l, "context": c, "coords": nan_to_none(xy), "explained": self.pca_explained[(l, c)]}
                    for (l, c), xy in sorted(self.pca.items())],
            "control": {k: (nan_to_none(v) if isinstance(v, np.ndarray) else v) for k, v in self.control.items()},
        }


def make_walks(graph: nx.Graph, num_walks: int, length: int, *, seed: int) -> np.ndarray:
    """[num_walks, length] random walks; walk b starts at node b mod N (different starts)."""
    rng = np.random.default_rng(seed)
    n = graph.number_of_nodes()
    return np.stack([random_walk(graph, length, generator=rng, start=b % n) for b in range(num_walks)])


def default_node_tokens(vocab_size: int, num_nodes: int, *, seed: int, exclude: tuple[int, ...] = ()) -> list[int]:
    """``num_nodes`` distinct random token ids from [0, vocab_size) minus ``exclude`` (special tokens)."""
    pool = np.setdiff1d(np.arange(vocab_size), np.asarray(exclude, dtype=np.int64))
    if len(pool) < num_nodes:
        raise ValueError(f"vocab_size: {vocab_size} leaves {len(pool)} usable tokens for {num_nodes} nodes")
    return [int(t) for t in np.random.default_rng(seed).choice(pool, num_nodes, replace=False)]


def default_context_lengths(walk_length: int, num: int = 14) -> list[int]:
    """Log-spaced context lengths from 4 to ``walk_length``."""
    return sorted({int(round(c)) for c in np.geomspace(min(4, walk_length), walk_length, num)})


class _Accumulator:
    """Per-node sums of representations over [c − W, c) windows, for every layer and c."""

    def __init__(self, contexts: list[int], window: int, num_nodes: int):
        self.contexts, self.window, self.n = contexts, window, num_nodes
        self.sums: list[np.ndarray] = []  # per layer: (C, N, d_layer)
        self.counts = np.zeros((len(contexts), num_nodes))

    def add(self, hidden: tuple[torch.Tensor, ...], nodes: torch.Tensor) -> None:
        """hidden: L+1 tensors [B, T, d]; nodes: [B, T] node ids."""
        if not self.sums:
            self.sums = [np.zeros((len(self.contexts), self.n, h.shape[-1])) for h in hidden]
        for ci, c in enumerate(self.contexts):
            lo = max(0, c - self.window)
            idx = nodes[:, lo:c].reshape(-1)  # (B*w,)
            self.counts[ci] += np.bincount(idx.numpy(), minlength=self.n)
            for layer, h in enumerate(hidden):
                part = h[:, lo:c].reshape(-1, h.shape[-1]).double()  # (B*w, d)
                acc = torch.zeros(self.n, h.shape[-1], dtype=torch.float64).index_add_(0, idx, part)
                self.sums[layer][ci] += acc.numpy()

    def means(self) -> list[np.ndarray]:
        """Per layer (C, N, d) class means; NaN rows for nodes absent from a window."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return [s / self.counts[:, :, None] for s in self.sums]


def _neighbour_mass(logits: torch.Tensor, nodes: torch.Tensor, tokens: torch.Tensor, A: torch.Tensor):
    """Mass on neighbours of the current node: restricted to graph tokens and full vocab.

    logits: [B, T, vocab]; nodes: [B, T]; tokens: [N]; A: [N, N]. Returns two [B, T].
    """
    logits = logits.double()
    restricted = torch.softmax(logits[..., tokens], dim=-1)  # (B, T, N)
    full = torch.softmax(logits, dim=-1)[..., tokens]  # (B, T, N)
    mask = A[nodes]  # (B, T, N) valid next nodes
    return (restricted * mask).sum(-1), (full * mask).sum(-1)


def _window_mean(values: np.ndarray, contexts: list[int], window: int) -> np.ndarray:
    """values [B, T] -> [C]: mean over walks and positions [c − W, c)."""
    return np.array([values[:, max(0, c - window):c].mean() for c in contexts])


@torch.no_grad()
def _run_model(model, walks: np.ndarray, tokens: torch.Tensor, A: np.ndarray, acc: list[_Accumulator],
               batch_size: int, report: Callable[[str], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Forward the walks in mini-batches, feed the accumulators, return neighbour masses [B, T]; ``report``
    gets one line as each mini-batch starts."""
    device = next(model.parameters()).device
    At = torch.as_tensor(A)
    restricted, full = [], []
    for b0 in range(0, len(walks), batch_size):
        if report is not None:
            report(f"walks {b0 + 1}–{min(b0 + batch_size, len(walks))} of {len(walks)} ({walks.shape[1]} tokens each, "
                   f"every layer's hidden states)")
        nodes = torch.as_tensor(walks[b0:b0 + batch_size])  # (b, T)
        out = model(input_ids=tokens[nodes].to(device), output_hidden_states=True)
        if getattr(out, "hidden_states", None) is None or getattr(out, "logits", None) is None:
            raise TypeError("model: output must carry .logits and .hidden_states (output_hidden_states=True)")
        hidden = tuple(h.detach().cpu() for h in out.hidden_states)
        for a in acc:
            a.add(hidden, nodes)
        r, f = _neighbour_mass(out.logits.detach().cpu(), nodes, tokens, At)
        restricted.append(r.numpy())
        full.append(f.numpy())
    return np.concatenate(restricted), np.concatenate(full)


def _energies(means: list[np.ndarray], A: np.ndarray, energy: Energy) -> tuple[np.ndarray, np.ndarray]:
    """means: per layer (C, N, d) -> energy, ratio (L+1, C) over the nodes present in each window."""
    E = np.full((len(means), means[0].shape[0]), np.nan)
    R = np.full_like(E, np.nan)
    for layer in range(len(means)):
        for ci in range(means[0].shape[0]):
            X = means[layer][ci]
            ok = np.isfinite(X).all(1)
            if ok.sum() >= 2 and np.linalg.norm(X[ok]) > 0:
                E[layer, ci] = dirichlet_energy(X[ok], A[np.ix_(ok, ok)], energy)
                R[layer, ci] = energy_ratio(X[ok], A[np.ix_(ok, ok)])
    return E, R


def _pca_all(means: list[np.ndarray], contexts: list[int]) -> tuple[dict, dict]:
    coords, explained = {}, {}
    for layer in range(len(means)):
        for ci, c in enumerate(contexts):
            X = means[layer][ci]
            ok = np.isfinite(X).all(1)
            xy = np.full((X.shape[0], 2), np.nan)
            ratio = [float("nan"), float("nan")]
            if ok.sum() >= 2:
                xy[ok], ratio = pca_2d(X[ok])
            coords[(layer, c)], explained[(layer, c)] = xy, ratio
    return coords, explained


def control_baseline(A: np.ndarray, dim: int, *, seed: int, energy: Energy = "park") -> dict:
    """Energy, energy ratio and PCA of random vectors before and after one neighbour-mixing round."""
    rand = np.random.default_rng(seed).standard_normal((A.shape[0], dim))
    mixed = neighbour_mixing_control(A, dim, seed=seed, mode="sum")
    coords, explained = pca_2d(mixed)
    return {
        "dim": dim, "mixing": "X + A X",
        "random_energy": dirichlet_energy(rand, A, energy), "random_energy_ratio": energy_ratio(rand, A),
        "mixed_energy": dirichlet_energy(mixed, A, energy), "mixed_energy_ratio": energy_ratio(mixed, A),
        "mixed_pca": coords, "mixed_pca_explained": explained,
    }


def trace_graph(
    model: torch.nn.Module,
    graph: nx.Graph,
    *,
    node_tokens: list[int] | None = None,
    num_walks: int = 16,
    walk_length: int = 1200,
    window: int = 50,
    pca_window: int | None = None,
    context_lengths: list[int] | None = None,
    pca_contexts: list[int] | None = None,
    batch_size: int = 4,
    seed: int = 0,
    energy: Energy = "park",
    report: Callable[[str], None] | None = None,
) -> GraphTracingResult:
    """Run the in-context graph-tracing probe on ``model`` (see the module docstring).

    Args:
        model: HF-style causal LM (``.config.vocab_size``; forward(input_ids, output_hidden_states)).
        graph: networkx graph on nodes 0..N-1 (``assocmem.training.graphs.make_graph``).
        node_tokens: token id of each node; default N distinct random ids (seeded).
        num_walks, walk_length: the batch of walks (walk b starts at node b mod N).
        window: trailing window W for class means (energy curves) and accuracy averaging.
        pca_window: window for the PCA class means (default: ``window``).
        context_lengths: c values for the curves (default log-spaced 4..walk_length).
        pca_contexts: c values at which PCA is taken for every layer (default: walk_length).
        energy: park (Σ A_ij ‖x_i − x_j‖², Park et al.) or normalised (÷ 2d‖X‖²_F); probes/energy.py.
        report: called with one line of progress per mini-batch of walks (the command line prints it).
    """
    check_length(model, walk_length, "walk_length")
    if energy not in ENERGIES:
        raise ValueError(f"energy: got {energy!r}, allowed {' or '.join(map(repr, ENERGIES))}")
    n = graph.number_of_nodes()
    A = adjacency(graph)
    if node_tokens is None:
        special = tuple(t for t in (getattr(model.config, k, None) for k in ("bos_token_id", "eos_token_id",
                        "pad_token_id")) if isinstance(t, int))
        node_tokens = default_node_tokens(model.config.vocab_size, n, seed=seed, exclude=special)
    if len(node_tokens) != n or len(set(node_tokens)) != n:
        raise ValueError(f"node_tokens: need {n} distinct token ids, got {node_tokens}")
    contexts = sorted(context_lengths or default_context_lengths(walk_length))
    pca_contexts = sorted(pca_contexts or [walk_length])
    for name, cs in (("context_lengths", contexts), ("pca_contexts", pca_contexts)):
        if cs[0] < 1 or cs[-1] > walk_length:
            raise ValueError(f"{name}: values must lie in [1, walk_length={walk_length}], got {cs}")
    pca_window = pca_window or window
    tokens = torch.as_tensor(node_tokens, dtype=torch.long)
    curve_acc, pca_acc = _Accumulator(contexts, window, n), _Accumulator(pca_contexts, pca_window, n)
    walks = make_walks(graph, num_walks, walk_length, seed=seed)
    was_training = model.training
    model.eval()
    try:
        restricted, full = _run_model(model, walks, tokens, A, [curve_acc, pca_acc], batch_size, report)
    finally:
        model.train(was_training)
    energies, ratio = _energies(curve_acc.means(), A, energy)
    coords, explained = _pca_all(pca_acc.means(), pca_contexts)
    return GraphTracingResult(
        graph_kind=graph.graph.get("kind", "custom"), num_nodes=n, node_tokens=list(node_tokens),
        context_lengths=contexts, window=window, pca_window=pca_window, energy=energies, energy_ratio=ratio,
        accuracy=_window_mean(restricted, contexts, window), accuracy_full=_window_mean(full, contexts, window),
        chance=float(A.sum(1)[walks].mean() / n), pca=coords, pca_explained=explained,
        control=control_baseline(A, pca_acc.sums[-1].shape[-1], seed=seed, energy=energy),
        nodes_present=[int(x) for x in (curve_acc.counts > 0).sum(1)], energy_definition=energy,
    )


def save_graph_tracing_figures(result: GraphTracingResult, graph: nx.Graph, out_dir, name: str = "graph_tracing",
                               title: str = "") -> list:
    """Write <name>_pca.png (a row of PCA contexts per layer, then the control panel, on a
    near-square grid) and <name>_curves.png (energy, energy ratio per layer and accuracy against context)."""
    from pathlib import Path

    out_dir = Path(out_dir)
    pca_cs = sorted({c for _, c in result.pca})
    rows = [[PCAPanel(result.pca[(l, c)], f"layer {l}, c={c}", result.pca_explained.get((l, c))) for c in pca_cs]
            for l in range(result.num_layers)]
    rows.append([PCAPanel(result.control["mixed_pca"], "control: X + A X", result.control.get("mixed_pca_explained"))])
    cs = result.context_lengths
    per_layer = lambda a: {f"layer {l}": (cs, list(a[l])) for l in range(result.num_layers)}  # noqa: E731
    context = "context length (tokens)"
    panels = [
        CurvePanel(ENERGY_LABELS[result.energy_definition], context, ENERGY_UNITS[result.energy_definition],
                   per_layer(result.energy), logy=True, hline=result.control["mixed_energy"],
                   hline_label="control X+AX"),
        CurvePanel("energy ratio E / E[shuffled]", context, "ratio (1 = unrelated to the graph)",
                   per_layer(result.energy_ratio), hline=result.control["mixed_energy_ratio"],
                   hline_label="control X+AX"),
        CurvePanel("neighbour accuracy", context, "probability mass on neighbours",
                   {"graph tokens": (cs, list(result.accuracy)), "full vocab": (cs, list(result.accuracy_full))},
                   hline=result.chance, hline_label="chance (graph tokens)", ylim=ACCURACY_LIMITS),
    ]
    return [save_pca_panels(out_dir / f"{name}_pca.png", rows, graph, suptitle=title),
            save_curve_panels(out_dir / f"{name}_curves.png", panels, suptitle=title)]
