"""The result registry (probes/experiments/registry.py), its tolerance rule, the packaged results and
``assocmem reproduce`` (probes/experiments/reproduce.py)."""
import json
import shlex
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from assocmem.probes.experiments import registry as rp
from assocmem.probes.experiments.reproduce import list_results, reproduce
from assocmem.cli import build_parser
from assocmem.cli import main as cli_main
from assocmem.training.results import make_record, read_result

ROOT = Path(__file__).resolve().parents[2]


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
                                           "--from", "{stored}/x.json", "--result", "{result}"),
        seeds=(0, 1), checks=(rp.Check("acc"),), minutes_per_seed=1.0))
    assert entry.documented_command() == ("assocmem train c --seeds 0 1 --set output_dir=runs/r --from "
                                          "probes/experiments/results/x.json --result "
                                          "probes/experiments/results/r.json")
    assert entry.argv((5,), "/t/runs", "/t/r.json", "/s") == ["train", "c", "--seeds", "5", "--set",
                                                               "output_dir=/t/runs", "--from", "/s/x.json",
                                                               "--result", "/t/r.json"]
    assert entry.stored_path("/s") == Path("/s/r.json")
    assert entry.rerun_seeds(quick=True) == (0,) and entry.rerun_seeds(quick=False) == (0, 1)
    with pytest.raises(ValueError, match="already registered"):
        rp.register(entry)
    with pytest.raises(KeyError, match=r"registered: \['r'\]"):
        rp.get("q")


# ---------------------------------------------------------------- the packaged results
def test_the_default_results_are_the_package_s_own_found_through_importlib_resources():
    folder = rp.packaged_results()
    assert folder == Path(str(files("assocmem.probes.experiments") / "results"))
    assert folder.resolve() == (ROOT / rp.DOCUMENTED_RESULTS).resolve()
    assert {f"{name}.json" for name in rp.REPRODUCIBLE} <= {p.name for p in folder.glob("*.json")}


def test_pyproject_ships_the_annex_and_its_results_with_the_package():
    """A plain (non-editable) install has the results: the package, its folder and its package data."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "assocmem.probes.experiments" in setuptools["packages"]
    assert setuptools["package-dir"]["assocmem.probes.experiments"] == "probes/experiments"
    data = setuptools["package-data"]["assocmem.probes.experiments"]
    shipped = {p.name for pattern in data for p in (ROOT / "probes" / "experiments").glob(pattern)}
    assert {p.name for p in rp.packaged_results().glob("*.json")} <= shipped


# ---------------------------------------------------------------- the registered results
def _parsed(command: str) -> dict:
    """The parsed flags of an ``assocmem ...`` command (what it runs, whatever the order of its flags)."""
    argv = shlex.split(command)[1:]
    args = vars(build_parser(argv[0]).parse_args(argv))
    return {k: v for k, v in args.items() if k not in ("func", "flags")}


@pytest.mark.parametrize("name", sorted(rp.REPRODUCIBLE))
def test_every_registered_result_is_stored_by_its_own_command(name):
    """The stored record exists, validates, was written by the registered command for the registered
    seeds (as spelled today: ``respell``), and holds every checked metric; so does the claim of each floor."""
    entry = rp.get(name)
    stored = read_result(entry.stored_path(rp.packaged_results()))
    assert stored.name == name and tuple(stored.seeds) == entry.seeds
    assert _parsed(rp.respell(stored.command)) == _parsed(entry.documented_command())
    for check in entry.checks:
        assert stored.summary[check.metric].n == len(entry.seeds), check.metric
        if check.at_least is not None:
            assert stored.summary[check.metric].min >= check.at_least, check.metric


@pytest.mark.parametrize("name", sorted(n for n, e in rp.REPRODUCIBLE.items() if e.command[0] == "experiment"))
def test_an_experiment_records_its_documented_command_as_it_is_written(name):
    """Running the documented command records exactly the documented command (``frame.Flags.words``)."""
    command = rp.get(name).documented_command()
    args = build_parser("experiment").parse_args(shlex.split(command)[1:])
    assert shlex.join(["assocmem", "experiment", args.experiment, *args.flags.words(args)]) == command


def test_old_spellings_are_respelled_once():
    assert rp.respell("assocmem probe rl-experiment --seeds 0 --result docs/results/rl.json") == \
        "assocmem experiment rl --seeds 0 --result probes/experiments/results/rl.json"
    assert rp.respell("assocmem probe wiola-claims --seed 0 --out x") == "assocmem experiment wiola-claims --seeds 0 --out x"
    assert rp.respell("assocmem train c --seeds 0 1") == "assocmem train c --seeds 0 1"


# ---------------------------------------------------------------- assocmem reproduce
def _tiny_config(tmp_path) -> Path:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "seed": 0, "output_dir": str(tmp_path / "runs"),
        "model": {"hf_config": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                                "max_position_embeddings": 64}},
        "data": {"kind": "mqar", "seq_len": 32, "num_kv_pairs": 4, "vocab_size": 64, "num_train": 256, "num_eval": 32},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "train": {"steps": 12, "batch_size": 8, "log_every": 1, "progress": False, "threads": 1, "eval_batch_size": 32,
                  "eval_every": 6}}))
    return config


def test_reproduce_reruns_into_a_fresh_folder_and_judges_against_the_given_results(tmp_path, monkeypatch, capsys):
    """A stored record in a --results folder of one's own; a rerun through ``assocmem reproduce`` (a fresh
    process, a fresh folder) repeats it, and a stored record whose numbers moved is caught."""
    config = _tiny_config(tmp_path)
    stored_dir = tmp_path / "stored"
    result = stored_dir / "tiny-result.json"
    assert cli_main(["train", str(config), "--seeds", "0", "1", "--result", str(result)]) == 0
    monkeypatch.setattr(rp, "REPRODUCIBLE", {})
    rp.register(rp.Reproducible(
        name="tiny-result", description="tiny", seeds=(0, 1), minutes_per_seed=0.1,
        command=("train", str(config), "--seeds", "{seeds}", "--set", "output_dir={out}", "--result", "{result}"),
        checks=(rp.Check("loss", atol=1e-6), rp.Check("accuracy@6", atol=1e-6))))
    capsys.readouterr()
    assert cli_main(["reproduce", "tiny-result", "--results", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "--results" in err and "is not a folder" in err
    assert reproduce("tiny-result", out=str(tmp_path / "again"), results=stored_dir) == 0
    out = capsys.readouterr().out
    assert "4 of 4 checked numbers hold" in out and f"stored by: assocmem train {config}" in out
    assert "note: the record was made on" not in out  # same machine: no word of instruction sets
    report = json.loads((tmp_path / "again" / "reproduce.json").read_text())
    assert report["stored"] == str(result)
    assert [v["value"] == v["stored_value"] for v in report["verdicts"]] == [True] * 4  # deterministic on CPU
    assert "| tiny-result | 0 1 |" in list_results(stored_dir)

    moved = json.loads(result.read_text())
    for seed in ("0", "1"):
        moved["per_seed"][seed]["loss"] += 1.0
    moved["summary"]["loss"] = {k: v + 1.0 if k != "n" else v for k, v in moved["summary"]["loss"].items()}
    result.write_text(json.dumps(moved))
    verdicts = rp.judge(rp.get("tiny-result"), read_result(result), read_result(tmp_path / "again" / "result.json"))
    assert [(v.metric, v.holds) for v in verdicts] == [("loss", False), ("loss", False), ("accuracy@6", True),
                                                       ("accuracy@6", True)]
    with pytest.raises(FileExistsError, match="not an empty folder"):
        reproduce("tiny-result", out=str(tmp_path / "again"), results=stored_dir)  # never into a folder with runs

    elsewhere = json.loads(result.read_text())
    elsewhere["versions"]["machine"] = "Other CPU, 64 cores"
    result.write_text(json.dumps(elsewhere))
    assert reproduce("tiny-result", out=str(tmp_path / "third"), results=stored_dir) == 1  # the moved loss
    assert "note: the record was made on Other CPU, 64 cores, the rerun ran on" in capsys.readouterr().out
