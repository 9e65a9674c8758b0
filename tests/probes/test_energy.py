"""Normalized Dirichlet energy, energy ratio, the neighbour-mixing control and PCA."""
import itertools

import networkx as nx
import numpy as np
import pytest

from assocmem.probes.energy import (
    adjacency, dirichlet_energy, energy_ratio, neighbour_mixing_control, pca_2d, procrustes_r2,
)
from assocmem.training.graphs import make_graph


def grid_positions(graph):
    return np.array([graph.nodes[i]["pos"] for i in range(graph.number_of_nodes())], dtype=float)


def test_energy_of_two_nodes_by_hand():
    # X̂ = X/√2, X̂_0 − X̂_1 = (1, −1)/√2, mean_d of squares = 1/2, E = ½·2·½ = ½
    A = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert dirichlet_energy(np.eye(2), A) == pytest.approx(0.5, abs=1e-15)


def test_energy_matches_explicit_double_sum():
    rng = np.random.default_rng(0)
    A = adjacency(make_graph("hex"))
    X = rng.standard_normal((A.shape[0], 7))
    Xh = X / np.linalg.norm(X)
    ref = 0.5 * sum(A[i, j] * np.mean((Xh[i] - Xh[j]) ** 2) for i in range(len(X)) for j in range(len(X)))
    assert dirichlet_energy(X, A) == pytest.approx(ref, abs=1e-14)
    assert dirichlet_energy(3.5 * X, A) == pytest.approx(ref, abs=1e-14)  # scale invariant


@pytest.mark.parametrize("kind", ["grid", "ring", "hex"])
def test_perfect_embedding_has_lower_energy_than_random(kind):
    graph = make_graph(kind)
    A = adjacency(graph)
    P = grid_positions(graph)
    rng = np.random.default_rng(1)
    random_energies = [dirichlet_energy(rng.standard_normal(P.shape), A) for _ in range(50)]
    assert dirichlet_energy(P, A) < min(random_energies)
    assert energy_ratio(P, A) < 0.35
    assert np.mean([energy_ratio(rng.standard_normal(P.shape), A) for _ in range(200)]) == pytest.approx(1.0, abs=0.03)


def test_energy_ratio_is_one_on_average_over_all_relabellings():
    graph = nx.path_graph(5)
    A = adjacency(graph)
    X = np.random.default_rng(2).standard_normal((5, 3))
    energies = [dirichlet_energy(X[list(p)], A) for p in itertools.permutations(range(5))]
    assert dirichlet_energy(X, A) / np.mean(energies) == pytest.approx(energy_ratio(X, A), abs=1e-13)


def test_pca_recovers_grid_from_rotated_high_dim_embedding():
    graph = make_graph("grid")
    P = grid_positions(graph)
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.standard_normal((16, 16)))
    X = P @ Q[:2] + rng.standard_normal(16)  # isometric embedding in R^16 plus a shift
    coords, explained = pca_2d(X)
    assert procrustes_r2(coords, P) == pytest.approx(1.0, abs=1e-12)
    assert sum(explained) == pytest.approx(1.0, abs=1e-12)


def test_procrustes_detects_a_scrambled_grid():
    P = grid_positions(make_graph("grid"))
    scrambled = P[np.random.default_rng(4).permutation(len(P))]
    assert procrustes_r2(scrambled, P) < 0.5


def test_neighbour_mixing_control_formula_and_effect():
    A = adjacency(make_graph("grid"))
    X = np.random.default_rng(5).standard_normal((16, 32))
    np.testing.assert_allclose(neighbour_mixing_control(A, 32, seed=5), X + A @ X, atol=0, rtol=0)
    rn = neighbour_mixing_control(A, 32, seed=5, mode="row_normalized")
    np.testing.assert_allclose(rn[0], (X[0] + X[1] + X[4]) / 3, atol=1e-15)
    # one round of mixing already lowers the energy ratio well below random (≈ 1)
    ratios = [energy_ratio(neighbour_mixing_control(A, 32, seed=s), A) for s in range(20)]
    assert np.mean(ratios) < 0.8


def test_bad_inputs_raise():
    A = adjacency(make_graph("ring"))
    with pytest.raises(ValueError, match="A: expected"):
        dirichlet_energy(np.ones((4, 2)), A)
    with pytest.raises(ValueError, match="NaN"):
        dirichlet_energy(np.full((10, 2), np.nan), A)
    with pytest.raises(ValueError, match="mode"):
        neighbour_mixing_control(A, 4, seed=0, mode="bogus")
