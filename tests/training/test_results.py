"""Result records (training/results.py), the reproducible registry and its tolerance rule
(training/reproducible.py), ``assocmem train --seeds --result`` and ``assocmem reproduce``."""
import hashlib
import json
import subprocess

import pytest
import torch

from assocmem.training import reproducible as rp
from assocmem.training.cli import main as cli_main
from assocmem.training.reproduce_cli import reproduce
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


# ---------------------------------------------------------------- the tolerance rule
def _stored(values, metric="acc"):
    return make_record(name="r", command="c", seeds=list(range(len(values))),
                       per_seed={i: {metric: v} for i, v in enumerate(values)})


def test_interval_is_the_mean_plus_minus_the_stored_range_never_below_atol():
    stored = _stored([0.90, 0.96, 0.93])  # mean 0.93, range 0.06
    low, high = rp.Check("acc").interval(stored)
    assert low == pytest.approx(0.87, abs=1e-15) and high == pytest.approx(0.99, abs=1e-15)
    assert rp.Check("acc", atol=0.1).interval(stored) == pytest.approx((0.83, 1.03), abs=1e-15)
    assert rp.Check("acc", at_least=0.9).interval(stored) == pytest.approx((0.9, 0.99), abs=1e-15)
    assert rp.Check("acc", atol=0.01).interval(_stored([1.0, 1.0])) == (0.99, 1.01)


def test_judge_checks_every_rerun_seed_on_its_own():
    entry = rp.Reproducible(name="r", description="", command=("x", "{seeds}", "{out}", "{result}"), seeds=(0, 1, 2),
                            checks=(rp.Check("acc", at_least=0.9),), minutes_per_seed=1.0)
    stored = _stored([0.90, 0.96, 0.93])
    rerun = make_record(name="r", command="c", seeds=[0, 1, 2], per_seed={0: {"acc": 0.95}, 1: {"acc": 0.89},
                                                                          2: {"acc": None}})
    verdicts = rp.judge(entry, stored, rerun)
    assert [(v.seed, v.holds, v.stored_value) for v in verdicts] == [(0, True, 0.90), (1, False, 0.96),
                                                                      (2, False, 0.93)]
    table = rp.verdict_table(verdicts, stored)
    assert table.count("| yes |") == 1 and table.count("| **no** |") == 2
    with pytest.raises(ValueError, match="has no metric 'loss'"):
        rp.judge(rp.Reproducible(name="r", description="", command=entry.command, seeds=(0,),
                                 checks=(rp.Check("loss"),), minutes_per_seed=1.0), stored, rerun)


def test_registry_entries_need_placeholders_and_unique_names(monkeypatch):
    with pytest.raises(ValueError, match=r"placeholders \['\{out\}'\]"):
        rp.Reproducible(name="r", description="", command=("train", "c", "{seeds}", "{result}"), seeds=(0,),
                        checks=(rp.Check("acc"),), minutes_per_seed=1.0)
    monkeypatch.setattr(rp, "REPRODUCIBLE", {})
    entry = rp.register(rp.Reproducible(
        name="r", description="", command=("train", "c", "--seeds", "{seeds}", "--set", "output_dir={out}",
                                           "--result", "{result}"),
        seeds=(0, 1), checks=(rp.Check("acc"),), minutes_per_seed=1.0))
    assert entry.documented_command() == ("assocmem train c --seeds 0 1 --set output_dir=runs/r "
                                          "--result docs/results/r.json")
    assert entry.argv((5,), "/t/runs", "/t/r.json") == ["train", "c", "--seeds", "5", "--set", "output_dir=/t/runs",
                                                         "--result", "/t/r.json"]
    assert entry.rerun_seeds(quick=True) == (0,) and entry.rerun_seeds(quick=False) == (0, 1)
    with pytest.raises(ValueError, match="already registered"):
        rp.register(entry)
    with pytest.raises(KeyError, match=r"registered: \['r'\]"):
        rp.get("q")


@pytest.mark.parametrize("name", sorted(rp.REPRODUCIBLE))
def test_every_registered_result_is_stored_by_its_own_command(name):
    """The stored record exists, validates, was written by the documented command for the
    registered seeds, and holds every checked metric; so does the claim of each floor."""
    entry = rp.get(name)
    stored = read_result(entry.stored_path)
    assert stored.name == name and tuple(stored.seeds) == entry.seeds
    assert stored.command == entry.documented_command()
    for check in entry.checks:
        assert stored.summary[check.metric].n == len(entry.seeds), check.metric
        if check.at_least is not None:
            assert stored.summary[check.metric].min >= check.at_least, check.metric


# ---------------------------------------------------------------- end to end
def test_train_seeds_writes_a_record_and_reproduce_confirms_it(write_config, tmp_path, monkeypatch, capsys):
    """Two tiny seeds → a record whose per-seed numbers are the runs' own; a rerun through
    ``assocmem reproduce`` (a fresh process, a fresh folder) repeats them, and a stored record
    whose numbers moved is caught."""
    config = write_config("tiny", {"train": {"eval_every": 6}})
    stored_dir = tmp_path / "stored"
    result = stored_dir / "tiny-result.json"
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

    monkeypatch.setattr(rp, "RESULTS_DIR", stored_dir)
    monkeypatch.setattr(rp, "REPRODUCIBLE", {})
    rp.register(rp.Reproducible(
        name="tiny-result", description="tiny", seeds=(0, 1), minutes_per_seed=0.1,
        command=("train", str(config), "--seeds", "{seeds}", "--set", "output_dir={out}", "--result", "{result}"),
        checks=(rp.Check("loss", atol=1e-6), rp.Check("accuracy@6", atol=1e-6))))
    assert reproduce("tiny-result", out=str(tmp_path / "again")) == 0
    out = capsys.readouterr().out
    assert "4 of 4 checked numbers hold" in out
    report = json.loads((tmp_path / "again" / "reproduce.json").read_text())
    assert [v["value"] == v["stored_value"] for v in report["verdicts"]] == [True] * 4  # deterministic on CPU

    moved = json.loads(result.read_text())
    moved["per_seed"]["0"]["loss"] += 1.0
    moved["per_seed"]["1"]["loss"] += 1.0
    moved["summary"]["loss"] = {k: v + 1.0 if k != "n" else v for k, v in moved["summary"]["loss"].items()}
    result.write_text(json.dumps(moved))
    verdicts = rp.judge(rp.get("tiny-result"), read_result(result), read_result(tmp_path / "again" / "result.json"))
    assert [(v.metric, v.holds) for v in verdicts] == [("loss", False), ("loss", False), ("accuracy@6", True),
                                                       ("accuracy@6", True)]
    with pytest.raises(FileExistsError, match="not an empty folder"):
        reproduce("tiny-result", out=str(tmp_path / "again"))  # never into a folder that holds runs
