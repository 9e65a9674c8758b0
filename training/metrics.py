"""Evaluation with torchmetrics: loss, perplexity and accuracy on supervised positions.

Each process evaluates every world_size-th batch; torchmetrics sums the
metric states over processes in ``compute()``, so the numbers are those of
the whole evaluation set whatever the number of processes.
"""
from __future__ import annotations

import datasets
import torch
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from .distributed import DistInfo
from .objective import CausalLMObjective


class SupervisedMetrics:
    """Running loss / perplexity / accuracy over supervised positions (logits [N, V], targets [N])."""

    def __init__(self, vocab_size: int, device: torch.device):
        self.loss = MeanMetric().to(device)
        self.perplexity = Perplexity().to(device)
        self.accuracy = MulticlassAccuracy(num_classes=vocab_size, average="micro").to(device)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        if targets.numel() == 0:
            return
        logits = logits.float()
        nll = torch.nn.functional.cross_entropy(logits, targets, reduction="mean")
        self.loss.update(nll, weight=targets.numel())
        self.perplexity.update(logits[None], targets[None])   # [1, N, V], [1, N]
        self.accuracy.update(logits.argmax(-1), targets)

    def compute(self) -> dict[str, float]:
        return {"loss": float(self.loss.compute()), "perplexity": float(self.perplexity.compute()),
                "accuracy": float(self.accuracy.compute())}


def batch_tensors(dataset: datasets.Dataset, rows, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels of ``rows`` as int64 tensors on ``device``."""
    batch = dataset.select_columns(["input_ids", "labels"]).with_format("numpy")[rows]
    return (torch.as_tensor(batch["input_ids"], dtype=torch.long, device=device),
            torch.as_tensor(batch["labels"], dtype=torch.long, device=device))


def batch_positions(dataset: datasets.Dataset, rows, device: torch.device) -> dict[str, torch.Tensor]:
    """``{"position_ids": [len(rows), T]}`` for data packed as separate documents (data.py
    ``pack_dataset``), else ``{}``: the keyword arguments the objective takes besides the batch."""
    if "position_ids" not in dataset.column_names:
        return {}
    batch = dataset.select_columns(["position_ids"]).with_format("numpy")[rows]
    return {"position_ids": torch.as_tensor(batch["position_ids"], dtype=torch.long, device=device)}


@torch.no_grad()
def evaluate(objective: CausalLMObjective, dataset: datasets.Dataset, *, batch_size: int, info: DistInfo,
             precision: str = "fp32") -> dict[str, float]:
    """Metrics of ``objective.model`` over the whole ``dataset`` (every process must call this)."""
    was_training = objective.training
    objective.eval()
    metrics: SupervisedMetrics | None = None
    starts = range(0, len(dataset), batch_size)
    for i, start in enumerate(starts):
        if i % info.world_size != info.rank:
            continue
        rows = list(range(start, min(start + batch_size, len(dataset))))
        input_ids, labels = batch_tensors(dataset, rows, info.device)
        with torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, targets = objective.selected_logits(input_ids, labels, **batch_positions(dataset, rows, info.device))
        if metrics is None:
            metrics = SupervisedMetrics(logits.shape[-1], info.device)
        metrics.update(logits, targets)
    if metrics is None:  # this rank had no batch: still join the sync with empty states
        vocab = objective.model.get_output_embeddings().weight.shape[0]
        metrics = SupervisedMetrics(vocab, info.device)
    objective.train(was_training)
    return metrics.compute()
