"""Graphs and random walks for in-context graph tracing (Park et al. 2025).

The three graph families of "ICLR: In-Context Learning of Representations":
a 4×4 grid, a ring of 10 nodes (i ~ i±1) and a hexagonal
lattice (``networkx.hexagonal_lattice_graph(3, 3)``, 30 nodes). Nodes are
relabelled to the integers 0..N-1 (in networkx's sorted node order) and every
node keeps a ``"pos"`` attribute (x, y) for drawing. Walks move uniformly over
the neighbours of the current node; the graphs have no self-edges.
"""
from __future__ import annotations

import math
from typing import Literal

import networkx as nx
import numpy as np

GraphKind = Literal["grid", "ring", "hex"]
GRAPH_KINDS: tuple[str, ...] = ("grid", "ring", "hex")
DEFAULT_SIZES: dict[str, int | tuple[int, int]] = {"grid": (4, 4), "ring": 10, "hex": (3, 3)}


def _as_pair(size: int | tuple[int, int], kind: str) -> tuple[int, int]:
    """Normalise an int n to (n, n); validate a pair of positive ints."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s >= 1 for s in pair):
        raise ValueError(f"size for kind={kind!r} must be a positive int or a pair of them, got {size!r}")
    return pair  # type: ignore[return-value]


def _grid(size: int | tuple[int, int]) -> nx.Graph:
    rows, cols = _as_pair(size, "grid")
    graph = nx.grid_2d_graph(rows, cols)  # nodes (i, j)
    nx.set_node_attributes(graph, {(i, j): (float(j), float(-i)) for i, j in graph.nodes}, "pos")
    return graph


def _ring(size: int | tuple[int, int]) -> nx.Graph:
    if not isinstance(size, int) or size < 3:
        raise ValueError(f"size for kind='ring' must be an int >= 3 (no self-edges or multi-edges), got {size!r}")
    graph = nx.cycle_graph(size)  # i ~ i±1 (mod size)
    angles = {i: 2 * math.pi * i / size for i in graph.nodes}
    nx.set_node_attributes(graph, {i: (math.cos(a), math.sin(a)) for i, a in angles.items()}, "pos")
    return graph


def _hex(size: int | tuple[int, int]) -> nx.Graph:
    rows, cols = _as_pair(size, "hex")
    return nx.hexagonal_lattice_graph(rows, cols, with_positions=True)  # sets "pos" itself


_BUILDERS = {"grid": _grid, "ring": _ring, "hex": _hex}


def make_graph(kind: GraphKind, *, size: int | tuple[int, int] | None = None) -> nx.Graph:
    """Build one of the Park et al. graphs with nodes relabelled to 0..N-1.

    Args:
        kind: "grid" (``grid_2d_graph(rows, cols)``, default 4×4), "ring"
            (cycle of ``size`` nodes, default 10) or "hex"
            (``hexagonal_lattice_graph(rows, cols)``, default 3×3 = 30 nodes).
        size: int n (grid/hex: n×n; ring: n nodes) or (rows, cols) for grid/hex.

    Returns:
        An undirected ``networkx.Graph`` on nodes 0..N-1 (sorted original
        order); each node has ``"pos"`` = (x, y) and ``"label"`` = its original
        networkx name (e.g. (i, j) for the grid).
    """
    if kind not in _BUILDERS:
        raise ValueError(f"kind must be one of {list(GRAPH_KINDS)}, got {kind!r}")
    graph = _BUILDERS[kind](DEFAULT_SIZES[kind] if size is None else size)
    order = sorted(graph.nodes)
    nx.set_node_attributes(graph, {node: node for node in order}, "label")
    relabelled = nx.relabel_nodes(graph, {node: i for i, node in enumerate(order)}, copy=True)
    out = nx.Graph()
    out.add_nodes_from(sorted(relabelled.nodes(data=True)))  # node order 0..N-1
    out.add_edges_from(relabelled.edges)
    out.graph["kind"] = kind
    return out


def neighbour_lists(graph: nx.Graph) -> list[np.ndarray]:
    """Sorted neighbour ids of every node 0..N-1 (a fixed order makes walks reproducible)."""
    return [np.array(sorted(graph.neighbors(node)), dtype=np.int64) for node in range(graph.number_of_nodes())]


def random_walk(
    graph: nx.Graph,
    length: int,
    *,
    generator: np.random.Generator,
    start: int | None = None,
) -> np.ndarray:
    """A uniform random walk x_0, ..., x_{length-1} on ``graph`` (nodes 0..N-1).

    x_0 = ``start`` (uniform over nodes when None); x_{t+1} is uniform over the
    neighbours of x_t. Deterministic given the generator state.

    Returns:
        int64 array of shape [length] of node ids.
    """
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")
    if not isinstance(generator, np.random.Generator):
        raise TypeError(f"generator must be a numpy.random.Generator, got {type(generator).__name__}")
    num_nodes = graph.number_of_nodes()
    if set(graph.nodes) != set(range(num_nodes)):
        raise ValueError("graph nodes must be 0..N-1 (build it with make_graph)")
    if start is not None and not (isinstance(start, (int, np.integer)) and 0 <= start < num_nodes):
        raise ValueError(f"start must be a node id in [0, {num_nodes}), got {start!r}")
    neighbours = neighbour_lists(graph)
    if any(len(n) == 0 for n in neighbours):
        raise ValueError("graph has an isolated node: a walk cannot leave it")
    walk = np.empty(length, dtype=np.int64)
    walk[0] = generator.integers(num_nodes) if start is None else int(start)
    # one uniform draw per step, mapped to a neighbour index: floor(u * degree)
    draws = generator.random(length - 1)
    for t in range(1, length):
        options = neighbours[walk[t - 1]]
        walk[t] = options[int(draws[t - 1] * len(options))]
    return walk
