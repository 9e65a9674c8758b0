"""curves.png of an RL run: reward and pass@1, ‖g⁻‖/‖g⁺‖, KL to the reference, response length."""
from __future__ import annotations

from pathlib import Path

from ..runlog import CURVES_FILE, LOG_FILE, read_log


def plot_rl_curves(run_dir: str | Path) -> Path:
    """Four panels against the round, from log.jsonl -> curves.png (training/figures.py layout)."""
    from ..figures import finish, integer_axis, panel_grid, save_figure

    run_dir = Path(run_dir)
    records = read_log(run_dir / LOG_FILE)
    train = [r for r in records if r.get("split") == "train"]
    evals = [r for r in records if r.get("split") == "eval"]
    steps = [r["step"] for r in train]
    style = {"marker": "o", "markersize": 3} if len(train) == 1 else {}  # a lone round is a point, not a line
    fig, axes = panel_grid(4, size=(4.0, 3.4))
    axes[0].plot(steps, [r["reward"] for r in train], label="reward (samples)", **style)
    axes[0].plot(steps, [r["pass@1"] for r in train], label="pass@1 (samples)", **style)
    axes[0].plot([r["step"] for r in evals], [r["pass@1"] for r in evals], "o-", label="pass@1 (held out)",
                 markersize=4)
    axes[1].plot(steps, [r["g_neg_over_g_pos"] if r["g_neg_over_g_pos"] is not None else float("nan") for r in train],
                 **style)
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[2].plot(steps, [r["kl"] for r in train], **style)
    axes[3].plot(steps, [r["length"] for r in train], **style)
    labels = ["reward / pass@1 (fraction)", "‖g⁻‖ / ‖g⁺‖ (ratio of gradient norms)",
              "KL to reference (k3 estimate, nats)", "response length (tokens)"]
    for ax, label in zip(axes, labels):
        ax.set(xlabel="round", ylabel=label)
        integer_axis(ax.xaxis)
        ax.grid(alpha=0.3)
    finish(fig, run_dir.name)
    return save_figure(fig, run_dir / CURVES_FILE, dpi=100)
