"""Graph-alignment measures for node representations (Park et al. 2025).

X ∈ R^{N×d} holds one representation per graph node (row i ↔ node i), A ∈ {0,1}^{N×N}
is the graph's adjacency. Two Dirichlet energies (``energy``, one table: ``ENERGIES``):

    park (default)   E(X) = Σ_ij A_ij ‖x_i − x_j‖²                              Park et al.'s definition
    normalised       E(X) = ½ Σ_ij A_ij · mean_d (X̂_i − X̂_j)²,  X̂ = X / ‖X‖_F     = park / (2 d ‖X‖²_F)

``park`` is the quantity Park et al. define and plot: it does not change when one vector is added
to every node, and it scales with ‖X‖². ``normalised`` divides it by 2 d ‖X‖²_F so that models of
different widths and scales share an axis; without centring, that divisor grows with a shift
shared by all nodes, so a translated copy of the same configuration scores lower (the 4×4 grid's
drawing positions: 0.107; shifted by (10, 10): 0.0036, with the geometry and ``park`` = 48 unchanged).

Both are compared with a random relabelling by the energy ratio

    ρ(X) = E(X) / E_π[E(X_π)]     (expectation over uniformly random relabellings π of the nodes)
         = Σ_ij A_ij D_ij / (2 |edges| · mean_{i≠j} D_ij),    D_ij = ‖x_i − x_j‖²

which is 1 for representations unrelated to the graph and < 1 when they follow it. The two
energies differ by a factor common to X and X_π, so ρ is the same for both, and it is invariant
to the scale of X, to a shift of every node and (for random X) to the width d.

The random-vector control (Arditi 2026): random node vectors after one
round of neighbour mixing already look graph-shaped under PCA, so a probe report
shows this baseline beside the model.
"""
from __future__ import annotations

from typing import Callable, Literal

import networkx as nx
import numpy as np
from sklearn.decomposition import PCA


def adjacency(graph: nx.Graph) -> np.ndarray:
    """Dense adjacency [N, N] (float64) of a graph whose nodes are 0..N-1."""
    nodes = sorted(graph.nodes)
    if nodes != list(range(len(nodes))):
        raise ValueError(f"graph: nodes must be 0..N-1, got {nodes[:5]}...")
    return nx.to_numpy_array(graph, nodelist=nodes, dtype=np.float64)


def _check(X: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X: expected [N, d], got shape {X.shape}")
    if A.shape != (X.shape[0], X.shape[0]):
        raise ValueError(f"A: expected [{X.shape[0]}, {X.shape[0]}], got shape {A.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X: contains NaN or inf (drop nodes without a representation first)")
    return X, A


def _pair_sq(X: np.ndarray) -> np.ndarray:
    """D[i, j] = ‖x_i − x_j‖².   X: [N, d] -> [N, N]."""
    sq = (X * X).sum(1)
    return np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0)


def _park(X: np.ndarray, A: np.ndarray) -> float:
    return float((A * _pair_sq(X)).sum())


def _normalised(X: np.ndarray, A: np.ndarray) -> float:
    norm = np.linalg.norm(X)
    if norm == 0.0:
        raise ValueError("X: all-zero representations have no normalised energy")
    return _park(X, A) / (2.0 * X.shape[1] * norm ** 2)


Energy = Literal["park", "normalised"]
# energy -> E(X, A)  (module docstring)
ENERGIES: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {"park": _park, "normalised": _normalised}
ENERGY_LABELS = {"park": "Dirichlet energy Σ A_ij ‖x_i − x_j‖² (Park et al.)",
                 "normalised": "normalised Dirichlet energy (÷ 2d‖X‖²_F)"}
ENERGY_UNITS = {"park": "E (squared hidden-state distance)", "normalised": "E (dimensionless)"}


def dirichlet_energy(X: np.ndarray, A: np.ndarray, energy: Energy = "park") -> float:
    """The Dirichlet energy of node representations X [N, d] on the symmetric adjacency A [N, N].

    park: Σ_ij A_ij ‖x_i − x_j‖² (Park et al. 2025); normalised: that ÷ 2 d ‖X‖²_F (module docstring).
    """
    if energy not in ENERGIES:
        raise ValueError(f"energy: got {energy!r}, allowed {' or '.join(map(repr, ENERGIES))}")
    X, A = _check(X, A)
    return ENERGIES[energy](X, A)


def energy_ratio(X: np.ndarray, A: np.ndarray) -> float:
    """E(X) divided by its expectation under a uniformly random relabelling of the nodes.

    1 = unrelated to the graph; 0 = neighbours identical. The same for both energies; invariant
    to the scale of X, a shift of every node, and (for random X) the width d.
    """
    X, A = _check(X, A)
    N = X.shape[0]
    if N < 2:
        raise ValueError(f"X: need at least 2 nodes, got {N}")
    D = _pair_sq(X)
    expected = A.sum() * D.sum() / (N * (N - 1))  # diagonal of D is 0
    if expected == 0.0:
        raise ValueError("X: all node representations are identical")
    return float((A * D).sum() / expected)


def neighbour_mixing_control(
    A: np.ndarray,
    dim: int,
    *,
    seed: int,
    mode: Literal["sum", "row_normalized"] = "sum",
) -> np.ndarray:
    """Random node vectors after one round of neighbour mixing, [N, dim].

    X ~ N(0, 1)^{N×dim};   "sum": X + A X;   "row_normalized": D̃⁻¹ (I + A) X with
    D̃ = diag(1 + degree) (each node averaged with its neighbours).
    """
    if dim < 1:
        raise ValueError(f"dim: must be >= 1, got {dim}")
    A = np.asarray(A, dtype=np.float64)
    X = np.random.default_rng(seed).standard_normal((A.shape[0], dim))
    if mode == "sum":
        return X + A @ X
    if mode == "row_normalized":
        M = np.eye(A.shape[0]) + A
        return (M / M.sum(1, keepdims=True)) @ X
    raise ValueError(f"mode: got {mode!r}, allowed 'sum' or 'row_normalized'")


def pca_2d(X: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """First two principal components of the rows of X (scikit-learn PCA, centred).

    Returns (coords [N, 2], explained_variance_ratio [2]).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X: expected [N >= 2, d], got shape {X.shape}")
    k = min(2, X.shape[0], X.shape[1])
    pca = PCA(n_components=k, svd_solver="full")
    coords = pca.fit_transform(X)
    if k < 2:  # a 1-D representation: plot on a line
        coords = np.concatenate([coords, np.zeros((X.shape[0], 2 - k))], axis=1)
    ratio = list(pca.explained_variance_ratio_) + [0.0] * (2 - k)
    return coords, [float(r) for r in ratio]


def procrustes_r2(Y: np.ndarray, P: np.ndarray) -> float:
    """How well target coordinates P [N, 2] are recovered by Y [N, 2] up to a similarity
    transform (rotation/reflection, scale, shift): 1 − residual / total variance of P.
    """
    Y = np.asarray(Y, dtype=np.float64) - np.mean(Y, 0)
    P = np.asarray(P, dtype=np.float64) - np.mean(P, 0)
    U, s, Vt = np.linalg.svd(Y.T @ P)
    R = U @ Vt  # optimal orthogonal map Y -> P
    scale = s.sum() / (Y * Y).sum()
    resid = P - scale * Y @ R
    return float(1.0 - (resid * resid).sum() / (P * P).sum())
