"""Learning-rate schedules (training/optim.py): ours against transformers' cosine_with_min_lr, every
transformers name through get_scheduler, and an extended resume under a transformers schedule."""
import pytest
import torch

from assocmem.training.config import ConfigError, OptimConfig, load_config
from assocmem.training.loop import train
from assocmem.training.optim import build_scheduler, lr_factor
from assocmem.training.runlog import read_log

HF_NAMES = ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
            "inverse_sqrt", "cosine_with_min_lr"]


def _rates(scheduler, optimizer, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def _optimizer(lr=1e-3):
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)


@pytest.mark.parametrize("warmup, total, floor", [(0, 10, 0.0), (4, 20, 0.1), (7, 7, 0.0), (3, 50, 0.25)])
def test_warmup_cosine_is_transformers_cosine_with_min_lr_one_step_ahead_in_the_warmup(warmup, total, floor):
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    hf = get_cosine_with_min_lr_schedule_with_warmup(_optimizer(), warmup, total, min_lr_rate=floor).lr_lambdas[0]
    for s in range(total):
        ours = lr_factor(s, total_steps=total, warmup_steps=warmup, min_lr_ratio=floor)
        if s < warmup:
            assert ours == hf(s + 1)                         # (s + 1) / W against transformers' s / W
            assert hf(s) == s / warmup                       # transformers' first step has lr 0
        else:
            assert ours == pytest.approx(hf(s), rel=1e-15, abs=1e-16)


@pytest.mark.parametrize("name", HF_NAMES)
def test_every_transformers_schedule_is_get_scheduler_of_that_name(name):
    from transformers import get_scheduler

    cfg = OptimConfig(lr=1e-3, warmup_steps=3, schedule=name, min_lr_ratio=0.1 if name == "cosine_with_min_lr" else 0)
    ours_opt, theirs_opt = _optimizer(), _optimizer()
    ours = _rates(build_scheduler(ours_opt, cfg, 17), ours_opt, 17)
    extra = {"min_lr_rate": 0.1} if name == "cosine_with_min_lr" else None
    theirs = _rates(get_scheduler(name, theirs_opt, num_warmup_steps=3, num_training_steps=17,
                                  scheduler_specific_kwargs=extra), theirs_opt, 17)
    assert ours == theirs
    assert len(set(ours)) == 1 if name == "constant" else len(set(ours)) > 3  # the rates do change


def test_a_floor_is_refused_where_the_schedule_does_not_read_it():
    with pytest.raises(ValueError, match="optim.min_lr_ratio is read by the warmup_cosine and cosine_with_min_lr"):
        OptimConfig(schedule="linear", min_lr_ratio=0.1)
    with pytest.raises(ValueError, match="schedule"):
        OptimConfig(schedule="reduce_lr_on_plateau")


def test_an_extended_run_follows_the_transformers_schedule_of_its_new_length(write_config, tmp_path):
    path = write_config("sched", {"optim": {"lr": 3e-3, "warmup_steps": 2, "schedule": "linear"},
                                  "train": {"steps": 8, "log_every": 1}})
    train(load_config(path))
    full = [r["lr"] for r in read_log(tmp_path / "runs" / "sched" / "log.jsonl") if r["split"] == "train"]
    short = load_config(path, ["name=short", "train.steps=4"])
    train(short)
    train(load_config(path, ["name=short", "train.steps=8"]), resume=True)
    resumed = [r["lr"] for r in read_log(tmp_path / "runs" / "short" / "log.jsonl") if r["split"] == "train"]
    assert len(full) == len(resumed) == 8
    assert resumed[4:] == full[4:]          # from the resume step on: the 8-step schedule
    assert resumed[:4] != full[:4]          # before it: the 4-step schedule the run had
    with pytest.raises(ConfigError):
        load_config(path, ["optim.schedule=warmup_stable_decay"])
