"""Running out of memory during `assocmem train` is one line (no traceback): what ran out and in which
step, the checkpoint that is saved (the newest; the step under way is lost) and the settings to lower with
their values; exit 1. The allocation failure is injected into a step (GPU: torch.OutOfMemoryError, host:
MemoryError or the CPU allocator's RuntimeError); other errors pass unchanged."""
from __future__ import annotations

import pytest
import torch
import yaml

from assocmem.cli import main
from assocmem.training.loop import Trainer
from assocmem.training.out_of_memory import OutOfMemory, allocation_failure
from training_helpers import BASE, merge

pytestmark = pytest.mark.usefixtures("one_thread")

CPU_ALLOCATOR = RuntimeError("[enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: "
                             "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)")


def test_allocation_failures_are_told_apart_from_other_errors():
    assert allocation_failure(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "GPU memory"
    assert allocation_failure(MemoryError()) == "host memory"
    assert allocation_failure(CPU_ALLOCATOR) == "host memory"
    assert allocation_failure(RuntimeError("shape mismatch")) is None
    assert allocation_failure(ValueError("out of memory")) is None


def _config(tmp_path, **train) -> str:
    cfg = merge(BASE, {"name": "oom", "output_dir": str(tmp_path / "runs"),
                       "train": {"steps": 4, "checkpoint_every": 2, "eval_every": 0, "micro_batch_size": 4, **train}})
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _fail_at(monkeypatch, step: int, error: BaseException) -> None:
    original = Trainer.train_step

    def step_or_fail(self):
        if self.step + 1 == step:
            raise error
        return original(self)

    monkeypatch.setattr(Trainer, "train_step", step_or_fail)


@pytest.mark.parametrize("error, what", [(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                          "out of GPU memory in step 3 of 4 (CUDA out of memory. Tried to allocate "
                                          "2.00 GiB)"),
                                         (CPU_ALLOCATOR, "out of host memory in step 3 of 4 ([enforce fail")])
def test_out_of_memory_in_a_step_names_the_step_the_checkpoint_and_what_to_lower(tmp_path, monkeypatch, capsys,
                                                                                 error, what):
    _fail_at(monkeypatch, 3, error)
    assert main(["train", _config(tmp_path)]) == 1
    err = capsys.readouterr().err
    run = tmp_path / "runs" / "oom"
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"assocmem train: {what}")
    assert (f"; saved: checkpoint {run / 'checkpoints' / 'step_00000002'}; lower train.micro_batch_size (now 4; "
            f"the global batch stays 8 by gradient accumulation) or train.eval_batch_size (now 32), then resume with "
            f"`assocmem train {run} --resume`") in err


def test_out_of_memory_before_any_checkpoint_says_nothing_is_saved(tmp_path, monkeypatch, capsys):
    _fail_at(monkeypatch, 1, MemoryError())
    assert main(["train", _config(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("assocmem train: out of host memory in step 1 of 4 (MemoryError); saved: nothing (no "
                          "checkpoint yet); lower train.micro_batch_size")
    assert err.rstrip().endswith("then start again (with --overwrite)")


def test_other_errors_pass_unchanged(tmp_path, monkeypatch):
    _fail_at(monkeypatch, 1, RuntimeError("shape mismatch"))
    from assocmem.training.config import load_config
    from assocmem.training.loop import train

    with pytest.raises(RuntimeError, match="shape mismatch") as caught:
        train(load_config(_config(tmp_path)))
    assert not isinstance(caught.value, OutOfMemory)
