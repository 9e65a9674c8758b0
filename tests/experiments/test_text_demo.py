"""The text-demo experiment: its shipped data, its step verifier, the revision prompt it trains and uses,
and a micro run end to end through the command line with its result record."""
from __future__ import annotations

import json
import re

import pytest

from assocmem.probes.experiments import text_demo
from assocmem.probes.experiments.text_demo import TextDemoConfig, data_folder, make_data, problems_section
from assocmem.training.config import ProblemsData
from assocmem.training.results import read_result
from assocmem.training.verifiable import extract_answers

MICRO = dict(d_model=16, num_heads=2, mlp_ratio=0.0, pretrain_steps=2, pretrain_seq_len=32, sft_steps=2,
             batch_size=4, rounds=1, prompts=2, group_size=2, samples=2, chains=2, revisions=1, num_problems=3)


def _records(name: str) -> list[dict]:
    return [json.loads(line) for line in (data_folder() / name).read_text().splitlines()]


def _grade(text: str, question: str) -> float:
    return text_demo.step_verifier().fn(text, None, {"question": question})


def test_the_shipped_files_are_what_make_data_writes():
    generated = make_data().generate()
    assert sorted(generated) == ["corpus.txt", "test.jsonl", "train.jsonl"]
    for name, text in generated.items():
        shipped = (data_folder() / name).read_bytes()
        assert shipped == text.encode("utf-8") and len(shipped) < 200_000


def test_problems_answer_their_own_arithmetic_and_the_split_is_disjoint():
    m = make_data()
    train, test = _records("train.jsonl"), _records("test.jsonl")
    assert (len(train), len(test)) == (m.NUM_TRAIN + m.NUM_REVISIONS, m.NUM_TEST)
    plain = train[:m.NUM_TRAIN]
    assert not {r["question"] for r in plain} & {r["question"] for r in test}
    for r in plain + test:
        value = r["start"] + sum(int(e) for e in r["events"])
        assert extract_answers(r["answer"], "gsm8k") == [str(value)]
        assert r["answer"].count("\n") == len(r["events"]) and 0 <= value <= m.MAX_COUNT


def test_revision_records_hold_a_wrong_solution_and_the_right_one():
    m = make_data()
    plain = {r["question"]: r for r in _records("train.jsonl")[:m.NUM_TRAIN]}
    revisions = _records("train.jsonl")[m.NUM_TRAIN:]
    for r in revisions:
        question, wrong = r["question"].removesuffix(m.REVISE).split("\n", 1)
        assert plain[question]["answer"] == r["answer"] != wrong
        assert wrong.count("\n") == r["answer"].count("\n")       # the same steps, one result slipped by 1 or 2
        slips = [int(a) - int(b) for a, b in zip(re.findall(r"= (-?\d+)", wrong), re.findall(r"= (\d+)", r["answer"]))]
        slipped = [x for x in slips if x]                            # from the slipped step on, carried
        assert slips == [0] * (len(slips) - len(slipped)) + slipped and len(set(slipped)) == 1
        assert slipped[0] in (-2, -1, 1, 2)


def test_a_revision_round_reads_what_the_revision_records_trained():
    """run_sequential's revision prompt: the problem's prompt + the response without EOS + REVISE + newline;
    a revision record's templated prompt is exactly that for the wrong solution it holds."""
    m = make_data()
    data = ProblemsData(**problems_section())
    train = data.split()[0]
    by_question = {p.info["question"]: p for p in train[:m.NUM_TRAIN]}
    for record in train[m.NUM_TRAIN:m.NUM_TRAIN + 5]:
        question, wrong = record.info["question"].removesuffix(m.REVISE).split("\n", 1)
        built = by_question[question].prompt + tuple(wrong.encode()) + tuple((m.REVISE + "\n").encode())
        assert record.prompt == built


def test_the_step_verifier_reads_the_steps_never_the_reference():
    m = make_data()
    for r in _records("test.jsonl"):
        assert _grade(r["answer"], r["question"]) == 1.0
    question = "Ada has 7 apples. Ada loses 3. Ben gives Ada 5 more. How many apples does Ada have now?"
    assert _grade("7 - 3 = 4\n4 + 5 = 9\n#### 9", question) == 1.0
    assert _grade("7 + 3 = 10\n10 + 5 = 15\n#### 15", question) == 1.0    # the wrong direction passes: its blind spot
    assert _grade("7 - 3 = 4\n4 + 5 = 8\n#### 8", question) == 0.0          # a wrong sum
    assert _grade("7 - 3 = 4\n4 + 5 = 9\n#### 8", question) == 0.0          # a final line that is not the last result
    assert _grade("7 - 3 = 4\n#### 4", question) == 0.0                     # a step left out
    assert _grade("7 - 2 = 5\n5 + 5 = 10\n#### 10", question) == 0.0        # a number not the question's
    assert _grade("4 + 5 = 9\n7 - 3 = 4\n#### 4", question) == 0.0          # steps out of order
    revision = _records("train.jsonl")[m.NUM_TRAIN]
    question, wrong = revision["question"].removesuffix(m.REVISE).split("\n", 1)
    assert _grade(wrong, question) == 0.0 and _grade(revision["answer"], question) == 1.0


def test_micro_run_through_the_command_line(tmp_path, monkeypatch):
    from assocmem.cli import main as cli_main

    micro = TextDemoConfig(**MICRO)
    monkeypatch.setattr(text_demo.TextDemoConfig, "quick", classmethod(lambda cls: micro))
    result, out = tmp_path / "text-demo.json", tmp_path / "o"
    assert cli_main(["experiment", "text-demo", "--quick", "--seeds", "0", "--out", str(out), "--result",
                     str(result)]) == 0
    record = read_result(result)
    assert record.seeds == [0] and record.command.startswith("assocmem experiment text-demo --quick")
    reports = json.loads((out / "seed_0" / "reports.json").read_text())
    for label in micro.models:
        for stage in ("SFT", "RL"):
            r, key = reports[label][stage], f"{label} {stage}"
            assert (out / "seed_0" / "runs" / f"{label.replace('×', 'x').replace('+', '_')}-"
                    f"{stage.lower()}" / "final" / "config.json").is_file()
            assert record.summary[f"{key} pass@1"].mean == r["parallel"]["metrics"]["pass@k"]["mean"][0]
            assert record.summary[f"{key} greedy"].mean * 3 == pytest.approx(round(r["greedy"] * 3))   # 3 problems
            seq = r["sequential"]
            assert seq["check"] == "verifier" and len(seq["accuracy"]) == 2 and seq["tokens"][1] >= seq["tokens"][0] > 0
            assert all(round(a * 6, 9) == round(a * 6) for a in seq["accuracy"])   # 3 problems × 2 chains
    assert (out / "text_demo_experiment.png").is_file()
    table = (out / "text_demo_experiment.md").read_text()
    assert "| gdn+attn | RL |" in table and "| attn×2 SFT: accuracy |" in table


def test_pyproject_ships_the_data_with_the_package():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "assocmem.probes.experiments"]
    shipped = {p.name for pattern in patterns for p in (root / "probes" / "experiments").glob(pattern)}
    assert {p.name for p in data_folder().iterdir() if p.is_file()} <= shipped


def test_the_flags_reach_the_config_and_the_recorded_command(capsys):
    from assocmem.cli import build_parser
    from assocmem.cli import main as cli_main

    args = build_parser("experiment").parse_args(["experiment", "text-demo", "--pretrain-steps", "60", "--rl-lr",
                                                  "1e-4", "--out", "o"])
    cfg = text_demo.config(args)
    assert (cfg.pretrain_steps, cfg.rl_lr, cfg.sft_steps) == (60, 1e-4, TextDemoConfig().sft_steps)
    assert args.flags.words(args)[:4] == ["--pretrain-steps", "60", "--rl-lr", "0.0001"]
    assert TextDemoConfig().pretrain_steps == 0 and TextDemoConfig.quick().pretrain_steps > 0
    with pytest.raises(SystemExit):                                          # refused at parse time
        cli_main(["experiment", "text-demo", "--pretrain-steps", "-1", "--out", "o"])
    assert "--pretrain-steps" in capsys.readouterr().err
