"""curves.png: a loss that spans less than a decade is labelled in plain numbers (runlog.plain_log_labels)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from assocmem.training.runlog import plain_log_labels  # noqa: E402

LOSSES = [4.31, 4.22, 4.18, 4.15, 4.12]


def _labels(plain: bool) -> list[str]:
    fig, ax = plt.subplots()
    ax.plot(range(len(LOSSES)), LOSSES)
    ax.set_yscale("log")
    if plain:
        plain_log_labels(ax.yaxis, LOSSES)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]
    plt.close(fig)
    return labels


def test_matplotlib_labels_a_sub_decade_log_axis_in_mathtext():
    assert any("times" in label for label in _labels(plain=False))


def test_plain_log_labels_are_plain_numbers():
    labels = _labels(plain=True)
    assert labels and all("times" not in label and "$" not in label for label in labels)
    assert {"4.2", "4.3"} <= set(labels)


def test_plain_log_labels_leave_an_axis_over_decades_alone():
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    before = ax.yaxis.get_major_formatter()
    plain_log_labels(ax.yaxis, [0.01, 5.0])
    assert ax.yaxis.get_major_formatter() is before
    plt.close(fig)
