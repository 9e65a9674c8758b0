"""Fourier Gradient Projection (seed 003 eq. 4) and the power spectrum of eq. 5, against an explicit
Fourier basis written the way Nanda et al. 2023 build it."""
import math

import numpy as np
import pytest
import torch

from assocmem.training.fourier import (check_modes, flat_spectrum_regularity, mode_power, num_bins,
                                       project_modes, regularity, top_modes)


def nanda_fourier_basis(p: int) -> tuple[torch.Tensor, list[tuple[str, int]]]:
    """The orthonormal Fourier basis of R^p in the layout of Nanda et al. 2023 (progress-measures-paper,
    ``transformers.py: make_fourier_basis``): a constant row 1/√p, then for i = 1..⌊p/2⌋ the rows
    cos(2π i t / p) and sin(2π i t / p), each divided by its norm. For even p the sine at i = p/2 is
    identically zero (their comment: an even p needs the cos(kπ) term explicitly); that row is dropped.
    Returns the basis [p, p] float64 and the (name, frequency) of each row."""
    t = torch.arange(p, dtype=torch.float64)
    rows, names = [torch.ones(p, dtype=torch.float64) / math.sqrt(p)], [("const", 0)]
    for i in range(1, p // 2 + 1):
        c = torch.cos(2 * math.pi * t * i / p)
        s = torch.sin(2 * math.pi * t * i / p)
        rows.append(c / c.norm())
        names.append(("cos", i))
        if s.norm() > 1e-9:
            rows.append(s / s.norm())
            names.append(("sin", i))
    return torch.stack(rows), names


def basis_projector(p: int, modes) -> torch.Tensor:
    """Σ_{rows r of frequency in S} b_r b_rᵀ: the orthogonal projector onto the modes S, [p, p]."""
    basis, names = nanda_fourier_basis(p)
    keep = [i for i, (_, f) in enumerate(names) if f in set(modes)]
    b = basis[keep]
    return b.T @ b


@pytest.mark.parametrize("p", [97, 113, 64])
def test_nanda_basis_is_orthonormal(p):
    basis, _ = nanda_fourier_basis(p)
    assert basis.shape == (p, p)
    torch.testing.assert_close(basis @ basis.T, torch.eye(p, dtype=torch.float64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("p,modes", [
    (97, [30, 35, 40, 45, 48]), (97, [1, 14, 41]), (97, [1]), (113, [34, 40, 46, 51, 56]),
    (113, [0, 1, 56]), (64, [0, 3, 32]), (64, [31, 32]),
])
def test_projection_equals_the_fourier_basis_projector(p, modes):
    g = torch.randn(p, 7, generator=torch.Generator().manual_seed(p), dtype=torch.float64)
    expected = basis_projector(p, modes) @ g
    torch.testing.assert_close(project_modes(g, modes, axis=0), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("n", [97, 64, 5])
def test_projection_is_idempotent_and_all_bins_is_the_identity(n):
    g = torch.randn(n, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    once = project_modes(g, [1, 2, n // 2], axis=0)
    torch.testing.assert_close(project_modes(once, [1, 2, n // 2], axis=0), once, atol=1e-12, rtol=0)
    assert (g - once).abs().max() > 0.1                        # a real projection, not the identity
    torch.testing.assert_close(project_modes(g, range(num_bins(n)), axis=0), g, atol=1e-12, rtol=0)


def test_only_the_first_n_indices_of_the_axis_are_transformed_and_any_axis_works():
    g = torch.randn(4, 99, generator=torch.Generator().manual_seed(1), dtype=torch.float64)  # the token axis is 1
    out = project_modes(g, [30, 48], axis=1, n=97)
    assert torch.equal(out[:, 97:], g[:, 97:])                                 # the '=' and EOS columns kept
    torch.testing.assert_close(out[:, :97], (basis_projector(97, [30, 48]) @ g[:, :97].T).T, atol=1e-12, rtol=0)
    torch.testing.assert_close(project_modes(g.T, [30, 48], axis=0, n=97), out.T, atol=0, rtol=0)


def test_float32_projection_matches_float64():
    g = torch.randn(113, 128, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(project_modes(g, [14, 35, 41], axis=0),
                               project_modes(g.double(), [14, 35, 41], axis=0).float())


def test_mode_power_satisfies_parseval():
    """Σ_t x_t² = (1/n)(P(0) + 2 Σ_{0<k<n/2} P(k) + P(n/2)) for even n (the rfft keeps half the bins): of all of
    x under sum_of_powers, of x summed over its columns under power_of_sum."""
    for n in (64, 97):
        x = torch.randn(n, 5, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
        weights = torch.full((num_bins(n),), 2.0, dtype=torch.float64)
        weights[0] = 1.0
        if n % 2 == 0:
            weights[-1] = 1.0
        each = mode_power(x, axis=0, power="sum_of_powers")
        summed = mode_power(x, axis=0)
        assert math.isclose(float((weights * each).sum()) / n, float(x.pow(2).sum()), rel_tol=1e-12)
        assert math.isclose(float((weights * summed).sum()) / n, float(x.sum(1).pow(2).sum()), rel_tol=1e-12)


def _dft_power(column: list[float], k: int) -> float:
    """|Σ_t x_t e^{−2πikt/n}|², one bin of one signal, written out (Python floats)."""
    n = len(column)
    re = sum(x * math.cos(2 * math.pi * k * t / n) for t, x in enumerate(column))
    im = -sum(x * math.sin(2 * math.pi * k * t / n) for t, x in enumerate(column))
    return re * re + im * im


def test_the_two_readings_of_eq_5_by_hand_and_where_they_part():
    """Seed 003 §4.1: "G is summed over the embedding dimension". Two columns that cancel at mode 1 and
    differ at mode 3 (n = 8): the power of the summed gradient has mode 3 only; the summed powers of the
    columns put mode 1 on top. Both against an explicit DFT."""
    n = 8
    t = torch.arange(n, dtype=torch.float64)
    c1, c3 = torch.cos(2 * math.pi * t / n), torch.cos(2 * math.pi * 3 * t / n + 0.4)
    g = torch.stack([2 * c1, -2 * c1 + c3], dim=1)                               # [8, 2]
    cols = [g[:, e].tolist() for e in range(2)]
    summed = [a + b for a, b in zip(*cols)]
    want_sum = torch.tensor([_dft_power(summed, k) for k in range(5)], dtype=torch.float64)
    want_each = torch.tensor([sum(_dft_power(c, k) for c in cols) for k in range(5)], dtype=torch.float64)
    torch.testing.assert_close(mode_power(g), want_sum, rtol=0, atol=1e-12)
    torch.testing.assert_close(mode_power(g, power="sum_of_powers"), want_each, rtol=0, atol=1e-12)
    assert want_sum[3] == pytest.approx(16.0, abs=1e-12) and float(want_sum[1]) == pytest.approx(0.0, abs=1e-12)
    assert want_each[1] == pytest.approx(128.0, abs=1e-12) and want_each[3] == pytest.approx(16.0, abs=1e-12)
    assert top_modes(mode_power(g), 1, skip_dc=True) == [3]
    assert top_modes(mode_power(g, power="sum_of_powers"), 1, skip_dc=True) == [1]
    assert regularity(mode_power(g), 1) == pytest.approx(1.0, abs=1e-12)
    assert regularity(mode_power(g, power="sum_of_powers"), 1) == pytest.approx(128 / 144, abs=1e-12)
    with pytest.raises(ValueError, match="fourier_power: got 'sum', allowed power_of_sum or sum_of_powers"):
        mode_power(g, power="sum")


def test_a_pure_cosine_has_regularity_one_and_its_mode_is_the_top_mode():
    n = 97
    t = torch.arange(n, dtype=torch.float64)
    wave = torch.cos(2 * math.pi * 41 * t / n + 0.3)[:, None] * torch.randn(1, 8, dtype=torch.float64)
    power = mode_power(wave, axis=0)
    assert regularity(power, 1) == pytest.approx(1.0, abs=1e-12)
    assert top_modes(power, 1, skip_dc=True) == [41]


def test_white_noise_regularity_is_the_share_of_the_k_largest_of_n_exponentials():
    """For white noise every bin's power is ≈ exponential with one mean, so the expected share of the K
    largest of N bins is Σ_{i=1..K} (H_N − H_{i−1}) / N (order statistics of exponentials), not K/N: the
    top-K of a flat spectrum is larger than a fixed K-bin share (16 of 257 bins: 0.23, not 0.062)."""
    n, k, draws = 512, 16, 200
    gen = torch.Generator().manual_seed(3)
    rhos = [regularity(mode_power(torch.randn(n, 1, generator=gen, dtype=torch.float64), axis=0), k)
            for _ in range(draws)]
    bins = num_bins(n)
    harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, bins + 1))])  # H_0..H_N
    expected = sum(harmonic[bins] - harmonic[i - 1] for i in range(1, k + 1)) / bins
    assert np.mean(rhos) == pytest.approx(expected, rel=0.05)
    assert flat_spectrum_regularity(bins, k) == pytest.approx(expected, rel=1e-12)
    assert 3 * k / bins < np.mean(rhos) < 5 * k / bins


def test_bad_modes_and_lengths_are_refused_with_the_allowed_range():
    with pytest.raises(ValueError, match=r"0\.\.48"):
        check_modes([49], 97)
    with pytest.raises(ValueError, match="at least one"):
        check_modes([], 97)
    with pytest.raises(ValueError, match=r"\[2, 10\]"):
        project_modes(torch.zeros(10, 3), [1], axis=0, n=11)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        project_modes(torch.zeros(10, 3), [1], axis=2)
    with pytest.raises(ValueError, match="zero total power"):
        regularity(torch.zeros(5), 1)
