"""torch.distributed for training: torchrun detection, DDP process groups, small collectives.

Launched by ``torchrun`` (which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), the trainer joins a process group: gloo on CPU, nccl on CUDA.
Launched as a plain process it runs alone (world size 1) and every collective
here is the identity. The global batch is split into equal contiguous slices
per rank, so N processes see exactly the sequences one process would.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: rank among world_size processes, and its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _pick_device(preference: str, local_rank: int) -> torch.device:
    if preference not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {preference!r}")
    if preference == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch.cuda.is_available() is False")
    use_cuda = preference == "cuda" or (preference == "auto" and torch.cuda.is_available())
    return torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the torchrun process group if launched by torchrun; otherwise a world of one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = _pick_device(device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def _wire_device() -> torch.device:
    """Where collectives run: the current GPU for nccl, the CPU for gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (returned on the input's device); identity when alone."""
    if not dist.is_initialized():
        return values
    out = values.to(_wire_device(), copy=True)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.to(values.device)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s Python object on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj) -> list:
    """Every rank's object, in rank order."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def rank_slice(global_batch: int, info: DistInfo) -> slice:
    """This rank's contiguous slice of a global batch (which must split evenly)."""
    if global_batch % info.world_size:
        raise ValueError(f"train.batch_size={global_batch} must be divisible by the number of processes "
                         f"({info.world_size})")
    per_rank = global_batch // info.world_size
    return slice(info.rank * per_rank, (info.rank + 1) * per_rank)
