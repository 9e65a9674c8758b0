"""train.log_to: the run log mirrored to TensorBoard (read back with TensorBoard's own reader), and a
sink whose package is missing refused before the run starts."""
import sys

import pytest
import yaml

from assocmem.cli import main as cli_main
from assocmem.training.config import load_config
from assocmem.training.loop import train
from assocmem.training.runlog import read_log


def test_tensorboard_holds_the_scalars_of_log_jsonl(write_config, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'assocmem[log]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(load_config(write_config("tb", {"train": {"steps": 4, "log_every": 1, "log_to": ["tensorboard"]}})))
    run = tmp_path / "runs" / "tb"
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    for split in ("train", "eval"):
        records = [r for r in read_log(run / "log.jsonl") if r["split"] == split]
        for key in ("loss", "accuracy") + (("lr", "grad_norm") if split == "train" else ()):
            scalars = events.Scalars(f"{split}/{key}")
            assert [s.step for s in scalars] == [r["step"] for r in records]
            assert [s.value for s in scalars] == pytest.approx([r[key] for r in records], rel=1e-6)  # float32


def test_a_missing_sink_package_is_refused_before_the_run(write_config, tmp_path, capsys, monkeypatch):
    """wandb is made missing in this process (``sys.modules["wandb"] = None``: ``import wandb`` raises
    ModuleNotFoundError) rather than assumed missing. Reading the environment made the outcome depend
    on it: a skip decided by ``find_spec("wandb")`` at collection, then the real import at run time,
    so whatever made wandb importable in between (an install into the shared venv by another process,
    a stand-in module left in sys.modules, a ``wandb`` folder on sys.path, where ``python -m pytest``
    puts the checkout's root) started the run instead of refusing it. (The failure on a loaded machine
    did not recur in 8 runs under load; this removes every such path.)"""
    monkeypatch.setitem(sys.modules, "wandb", None)
    path = write_config("wb", {"train": {"steps": 2, "log_to": ["wandb"]}})
    assert cli_main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "train.log_to: wandb needs the wandb package, which is not installed" in err
    assert not (tmp_path / "runs" / "wb").exists()
    with pytest.raises(Exception, match="log_to"):
        load_config(write_config("bad", {"train": {"log_to": ["mlflow"]}}))
    assert yaml.safe_load(path.read_text())["train"]["log_to"] == ["wandb"]


class _WandbRun:
    """What ``wandb.init`` returns, reduced to the calls ``WandbSink`` makes (``log``, ``finish``)."""

    def __init__(self, **init):
        self.init, self.logged, self.finished = init, [], 0

    def log(self, data: dict, step: int) -> None:
        self.logged.append((step, dict(data)))

    def finish(self) -> None:
        self.finished += 1


def test_wandb_receives_the_scalars_of_log_jsonl(write_config, tmp_path, monkeypatch):
    """The wandb sink against wandb's API (``init(project, name, dir, config)``, ``run.log(data, step)``,
    ``run.finish()``), with a stand-in module: one run per training run, in its folder, every numeric field
    of every log record at its step, finished once."""
    import types

    runs = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: runs.append(_WandbRun(**kw)) or runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    train(load_config(write_config("wb", {"train": {"steps": 4, "log_every": 1, "log_to": ["wandb"]}})))
    run_dir = tmp_path / "runs" / "wb"
    assert len(runs) == 1 and runs[0].finished == 1
    init = runs[0].init
    assert (init["project"], init["name"], init["dir"]) == ("assocmem", "wb", str(run_dir))
    assert init["config"]["train"]["steps"] == 4 and init["config"]["train"]["log_to"] == ["wandb"]
    records = read_log(run_dir / "log.jsonl")
    expected = [(r["step"], {f"{r['split']}/{k}": float(v) for k, v in r.items()
                             if k not in ("split", "step") and isinstance(v, (int, float)) and not isinstance(v, bool)})
                for r in records]
    assert runs[0].logged == expected
    assert {"train/loss", "train/lr", "eval/loss", "eval/accuracy"} <= {k for _, d in expected for k in d}
