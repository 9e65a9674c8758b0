"""train.log_to: the run log mirrored to TensorBoard (read back with TensorBoard's own reader), and a
sink whose package is missing refused before the run starts."""
import importlib.util

import pytest
import yaml

from assocmem.training.cli import main as cli_main
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


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_a_missing_sink_package_is_refused_before_the_run(write_config, tmp_path, capsys):
    path = write_config("wb", {"train": {"steps": 2, "log_to": ["wandb"]}})
    assert cli_main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert "train.log_to: wandb needs the wandb package, which is not installed" in err
    assert not (tmp_path / "runs" / "wb").exists()
    with pytest.raises(Exception, match="log_to"):
        load_config(write_config("bad", {"train": {"log_to": ["mlflow"]}}))
    assert yaml.safe_load(path.read_text())["train"]["log_to"] == ["wandb"]
