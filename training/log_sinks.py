"""Optional mirrors of the run log (``train.log_to``): TensorBoard and Weights & Biases.

log.jsonl stays the record of a run; each sink receives the same records (rank 0 only) as scalars
named ``<split>/<key>`` at their ``step``:

    tensorboard   torch.utils.tensorboard.SummaryWriter into <run>/tensorboard/
                  (``pip install 'assocmem[log]'``; ``tensorboard --logdir runs/``)
    wandb         wandb.init(project="assocmem", name=<run name>, dir=<run>, config=<TrainConfig>);
                  online or offline as wandb itself is set up (``wandb login``, ``WANDB_MODE=offline``)

A sink whose package is missing is refused before the run starts (``check_sinks``), naming the
package to install.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # sink -> the module it needs


def check_sinks(names: list[str]) -> None:
    """Raise ValueError naming the package when a sink of ``names`` cannot be imported."""
    for name in names:
        try:
            importlib.import_module(_PACKAGES[name])
        except ImportError as err:
            raise ValueError(f"train.log_to: {name} needs the {_PACKAGES[name]} package, which is not installed "
                             f"({err}); pip install {_PACKAGES[name]} (tensorboard: pip install 'assocmem[log]'), "
                             f"or remove {name} from train.log_to") from None


def _scalars(record: dict) -> tuple[str, int, dict[str, float]]:
    """(split, step, {key: value}) of the numeric fields of a log record."""
    split, step = str(record.get("split", "train")), int(record["step"])
    values = {k: float(v) for k, v in record.items()
              if k not in ("split", "step") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return split, step, values


class TensorBoardSink:
    """Scalars into <run>/tensorboard/ (event files)."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def write(self, record: dict) -> None:
        split, step, values = _scalars(record)
        for key, value in values.items():
            self.writer.add_scalar(f"{split}/{key}", value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """One wandb run per assocmem run, in the run folder."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        import wandb

        self.run = wandb.init(project="assocmem", name=name, dir=str(run_dir), config=config)

    def write(self, record: dict) -> None:
        split, step, values = _scalars(record)
        self.run.log({f"{split}/{key}": value for key, value in values.items()}, step=step)

    def close(self) -> None:
        self.run.finish()


SINKS = {"tensorboard": TensorBoardSink, "wandb": WandbSink}


def open_sinks(names: list[str], run_dir: str | Path, *, name: str, config: dict[str, Any]) -> list:
    """The sinks of ``train.log_to``, opened on the run folder."""
    check_sinks(names)
    return [SINKS[n](Path(run_dir), name, config) for n in names]
