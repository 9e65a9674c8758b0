"""Graph families and random walks for in-context graph tracing (REFERENCES §3)."""
import networkx as nx
import numpy as np
import pytest

from assocmem.training.graphs import make_graph, random_walk


@pytest.mark.parametrize("kind,nodes,edges", [("grid", 16, 24), ("ring", 10, 10), ("hex", 30, 38)])
def test_default_graphs_match_the_paper(kind, nodes, edges):
    graph = make_graph(kind)
    assert list(graph.nodes) == list(range(nodes))
    assert graph.number_of_edges() == edges
    assert nx.number_of_selfloops(graph) == 0
    assert all(len(graph.nodes[n]["pos"]) == 2 for n in graph.nodes)


def test_ring_is_i_plus_minus_one():
    graph = make_graph("ring", size=7)
    assert sorted(tuple(sorted(e)) for e in graph.edges) == sorted(
        tuple(sorted((i, (i + 1) % 7))) for i in range(7))


def test_grid_labels_and_positions():
    graph = make_graph("grid", size=(2, 3))
    assert [graph.nodes[n]["label"] for n in graph.nodes] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert graph.has_edge(0, 1) and graph.has_edge(0, 3) and not graph.has_edge(0, 4)


@pytest.mark.parametrize("kind", ["grid", "ring", "hex"])
def test_walk_follows_edges_and_is_seeded(kind):
    graph = make_graph(kind)
    walk = random_walk(graph, 500, generator=np.random.default_rng(3), start=2)
    assert walk[0] == 2 and walk.dtype == np.int64 and walk.shape == (500,)
    assert all(graph.has_edge(int(a), int(b)) for a, b in zip(walk[:-1], walk[1:]))
    again = random_walk(graph, 500, generator=np.random.default_rng(3), start=2)
    np.testing.assert_array_equal(walk, again)


def test_walk_transitions_are_uniform_over_neighbours():
    graph = make_graph("grid")
    walk = random_walk(graph, 40000, generator=np.random.default_rng(0))
    src, dst = walk[:-1], walk[1:]
    centre = 5  # degree 4 in the 4x4 grid
    counts = np.bincount(dst[src == centre], minlength=16)[sorted(graph.neighbors(centre))]
    freq = counts / counts.sum()
    np.testing.assert_allclose(freq, 0.25, atol=0.03)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="kind"):
        make_graph("torus")
    with pytest.raises(ValueError, match="start"):
        random_walk(make_graph("ring"), 5, generator=np.random.default_rng(0), start=10)
    with pytest.raises(TypeError, match="generator"):
        random_walk(make_graph("ring"), 5, generator=0)
