"""The Dirichlet energies (Park et al.'s Σ A_ij ‖x_i − x_j‖² and the normalised one), the energy ratio, the
neighbour-mixing control and PCA."""
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
    A = np.array([[0.0, 1.0], [1.0, 0.0]])
    # park: both orderings of the edge, ‖(1, −1)‖² = 2 each: E = 4
    assert dirichlet_energy(np.eye(2), A) == 4.0
    # normalised: X̂ = X/√2, X̂_0 − X̂_1 = (1, −1)/√2, mean_d of squares = 1/2, E = ½·2·½ = ½
    assert dirichlet_energy(np.eye(2), A, "normalised") == pytest.approx(0.5, abs=1e-15)


def test_energies_match_explicit_double_sums():
    rng = np.random.default_rng(0)
    A = adjacency(make_graph("hex"))
    X = rng.standard_normal((A.shape[0], 7))
    park = sum(A[i, j] * np.sum((X[i] - X[j]) ** 2) for i in range(len(X)) for j in range(len(X)))
    Xh = X / np.linalg.norm(X)
    normalised = 0.5 * sum(A[i, j] * np.mean((Xh[i] - Xh[j]) ** 2) for i in range(len(X)) for j in range(len(X)))
    assert dirichlet_energy(X, A) == pytest.approx(park, rel=1e-14)
    assert dirichlet_energy(X, A, "normalised") == pytest.approx(normalised, abs=1e-14)
    assert dirichlet_energy(3.5 * X, A, "normalised") == pytest.approx(normalised, abs=1e-14)  # scale invariant
    assert dirichlet_energy(3.5 * X, A) == pytest.approx(3.5 ** 2 * park, rel=1e-14)              # park is not


def test_a_shift_of_every_node_leaves_park_and_the_ratio_and_moves_the_normalised_energy():
    """The readings part on a translated copy of one configuration: the 4×4 grid's drawing positions and the same
    positions + (10, 10). Values by hand: Σ_ij A_ij ‖p_i − p_j‖² = 2 · 24 edges · 1 = 48; ‖P‖²_F = 112, and after
    the shift 3312; the normalised energy is 48 / (2 · 2 · ‖P‖²_F)."""
    graph = make_graph("grid")
    A, P = adjacency(graph), grid_positions(graph)
    shifted = P + np.array([10.0, 10.0])
    assert np.sum(P ** 2) == 112.0 and np.sum(shifted ** 2) == 3312.0
    assert dirichlet_energy(P, A) == dirichlet_energy(shifted, A) == 48.0
    assert dirichlet_energy(P, A, "normalised") == pytest.approx(48 / (4 * 112), rel=1e-15)      # 0.107
    assert dirichlet_energy(shifted, A, "normalised") == pytest.approx(48 / (4 * 3312), rel=1e-15)  # 0.0036
    assert energy_ratio(shifted, A) == pytest.approx(energy_ratio(P, A), rel=1e-13)
    assert energy_ratio(P, A) == pytest.approx(48 / (A.sum() * _mean_pair_sq(P)), rel=1e-13)


def _mean_pair_sq(X):
    """mean over i ≠ j of ‖x_i − x_j‖² (explicit loops)."""
    n = len(X)
    return sum(np.sum((X[i] - X[j]) ** 2) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))


def test_the_cli_offers_the_library_energies():
    import argparse

    from assocmem.cli.probe import _graph_parser
    from assocmem.probes.energy import ENERGIES

    parser = _graph_parser(argparse.ArgumentParser().add_subparsers())
    action = next(a for a in parser._actions if a.dest == "energy")
    assert action.choices == list(ENERGIES) and action.default == "park"


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
    for energy in ("park", "normalised"):  # a factor common to X and its relabellings: one ratio for both
        energies = [dirichlet_energy(X[list(p)], A, energy) for p in itertools.permutations(range(5))]
        assert dirichlet_energy(X, A, energy) / np.mean(energies) == pytest.approx(energy_ratio(X, A), abs=1e-13)


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
    with pytest.raises(ValueError, match="energy: got 'dirichlet', allowed 'park' or 'normalised'"):
        dirichlet_energy(np.ones((10, 2)), A, "dirichlet")
    with pytest.raises(ValueError, match="mode"):
        neighbour_mixing_control(A, 4, seed=0, mode="bogus")
