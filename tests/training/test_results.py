"""Result records (training/results.py) and ``assocmem train --seeds --result`` (the registry and
``assocmem reproduce``: tests/experiments/test_registry.py)."""
import hashlib
import json
import subprocess

import pytest
import torch

from assocmem.cli import main as cli_main
from assocmem.training.results import (REPO_ROOT, make_record, read_result, save_record, summarize,
                                       write_result)


# ---------------------------------------------------------------- records
def test_summary_is_mean_min_max_over_the_seeds_that_have_a_value():
    per_seed = {0: {"acc": 0.5, "steps": 300.0}, 1: {"acc": 0.25, "steps": None}, 2: {"acc": 1.0, "steps": 500.0}}
    s = summarize(per_seed)
    assert (s["acc"].mean, s["acc"].min, s["acc"].max, s["acc"].n) == (1.75 / 3, 0.25, 1.0, 3)
    assert (s["steps"].mean, s["steps"].min, s["steps"].max, s["steps"].n) == (400.0, 300.0, 500.0, 2)
    assert s["acc"].range == 0.75
    with pytest.raises(ValueError, match="non-finite values \\[nan\\]"):
        summarize({0: {"acc": float("nan")}})


def test_record_round_trips_and_names_the_environment(tmp_path):
    path = tmp_path / "r.json"
    rec = write_result(path, name="r", command="assocmem x --seeds 3 4", seeds=[3, 4],
                       per_seed={3: {"acc": 0.5}, 4: {"acc": 0.75}}, extra={"note": [1, 2]})
    back = read_result(path)
    assert back == rec and back.values("acc") == {3: 0.5, 4: 0.75} and back.summary["acc"].mean == 0.625
    v = back.versions
    assert v.torch == torch.__version__ and v.python.count(".") == 2
    assert v.lock_sha256 == hashlib.sha256((REPO_ROOT / "constraints.txt").read_bytes()).hexdigest()
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert v.assocmem_commit == (head.stdout.strip() if head.returncode == 0 else None)
    raw = json.loads(path.read_text())
    assert raw["format"] == 1 and raw["per_seed"] == {"3": {"acc": 0.5}, "4": {"acc": 0.75}}


def test_a_stored_record_is_never_replaced_silently(tmp_path):
    path = tmp_path / "r.json"
    rec = make_record(name="r", command="c", seeds=[0], per_seed={0: {"acc": 1.0}})
    save_record(rec, path)
    with pytest.raises(FileExistsError, match="--overwrite"):
        save_record(rec, path)
    save_record(rec.model_copy(update={"description": "new"}), path, overwrite=True)
    assert read_result(path).description == "new"


def test_bad_records_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="per_seed has seeds \\[0\\], but seeds=\\[0, 1\\]"):
        make_record(name="r", command="c", seeds=[0, 1], per_seed={0: {"acc": 1.0}})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 1, "name": "r"}))
    with pytest.raises(ValueError, match="bad.json is not a valid result record"):
        read_result(bad)
    with pytest.raises(FileNotFoundError, match="no result record"):
        read_result(tmp_path / "absent.json")


# ---------------------------------------------------------------- end to end
def test_train_seeds_writes_a_record_with_the_runs_numbers(write_config, tmp_path, capsys):
    """Two tiny seeds → a record whose per-seed numbers are the runs' own, and the command as typed."""
    config = write_config("tiny", {"train": {"eval_every": 6}})
    result = tmp_path / "stored" / "tiny-result.json"
    argv = ["train", str(config), "--seeds", "0", "1", "--result", str(result)]
    assert cli_main(argv) == 0
    assert "mean [min, max]" in capsys.readouterr().out
    rec = read_result(result)
    for seed in (0, 1):
        summary = json.loads((tmp_path / "runs" / f"tiny-s{seed}" / "summary.json").read_text())
        assert rec.per_seed[str(seed)]["accuracy"] == summary["eval"]["accuracy"]
        assert set(rec.per_seed[str(seed)]) >= {"accuracy@6", "accuracy@12", "loss", "steps_to_0.9"}
    assert rec.per_seed["0"]["loss"] != rec.per_seed["1"]["loss"]  # the seed changes the initialisation
    assert rec.command == f"assocmem train {config} --seeds 0 1 --result {result}"
    assert cli_main(argv) == 2 and "exists" in capsys.readouterr().err  # a stored result stays
