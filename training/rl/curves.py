"""curves.png of an RL run: reward and pass@1, ‖g⁻‖/‖g⁺‖, KL to the reference, response length."""
from __future__ import annotations

from pathlib import Path

from ..runlog import CURVES_FILE, LOG_FILE, read_log


def plot_rl_curves(run_dir: str | Path) -> Path:
    """Four panels against the round, from log.jsonl -> curves.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_log(run_dir / LOG_FILE)
    train = [r for r in records if r.get("split") == "train"]
    evals = [r for r in records if r.get("split") == "eval"]
    steps = [r["step"] for r in train]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    axes[0].plot(steps, [r["reward"] for r in train], label="reward (samples)")
    axes[0].plot(steps, [r["pass@1"] for r in train], label="pass@1 (samples)")
    axes[0].plot([r["step"] for r in evals], [r["pass@1"] for r in evals], "o-", label="pass@1 (held out)")
    axes[1].plot(steps, [r["g_neg_over_g_pos"] if r["g_neg_over_g_pos"] is not None else float("nan") for r in train])
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[2].plot(steps, [r["kl"] for r in train])
    axes[3].plot(steps, [r["length"] for r in train])
    for ax, label in zip(axes, ["reward / pass@1", "‖g⁻‖ / ‖g⁺‖", "KL to reference (k3)", "response length"]):
        ax.set(xlabel="round", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    out = run_dir / CURVES_FILE
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
