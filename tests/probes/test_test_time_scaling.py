"""probe tts: grading, the metric table against the estimators, invariants of a real run, the CLI."""
import json

import numpy as np
import pytest
import torch
import yaml

from assocmem.models import HybridConfig, build_model
from assocmem.probes.test_time_scaling import METRICS, curves, default_ks, grade, run_tts
from assocmem.cli import main as cli_main
from assocmem.training.estimators import maj_at_k_expected, pass_at_k
from assocmem.training.generation import Completions, SamplingSettings
from assocmem.training.verifiable import ChainSum, Modular
from assocmem.training.verifiable.chain_sum import ANS, EOS


pytestmark = pytest.mark.usefixtures("one_thread")


def test_default_ks():
    assert default_ks(32) == [1, 2, 4, 8, 16, 32] and default_ks(12) == [1, 2, 4, 8, 12] and default_ks(1) == [1]


def test_grading_and_curves_on_known_responses():
    task = ChainSum(num_digits=2)
    problems = task.problems(2, seed=0)
    a0, a1 = (p.info["answer"] for p in problems)
    responses = [[(0, 0, ANS, a0, EOS), (0, 0, ANS, (a0 + 1) % 10, EOS), (0, 0, ANS, a0, EOS), (0, EOS)],
                 [(ANS, (a1 + 2) % 10, EOS)] * 3 + [(ANS, a1, ANS, (a1 + 3) % 10, EOS)]]
    completions = Completions(responses=responses, finished=np.ones((2, 4), bool),
                              logprob_sum=np.array([[-1.0, -0.5, -2.0, -9.0], [-1.0, -1.0, -1.0, -0.1]]),
                              num_tokens=np.array([[5, 5, 5, 2], [3, 3, 3, 5]]))
    first = grade(task, problems, completions, "first")
    assert first[0].correct == [True, False, True, False] and first[1].correct == [False, False, False, True]
    assert first[0].answers[3] is None
    strict = grade(task, problems, completions, "strict")
    assert strict[1].correct == [False] * 4 and strict[1].answers[3] is None        # two candidates: wrong
    report = curves(first, [1, 2, 4], num_resamples=200)
    assert report["pass@k"]["mean"] == pytest.approx([(0.5 + 0.25) / 2, (pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 2,
                                                      1.0], abs=1e-15)
    assert report["best-of-N@k (checker)"]["mean"] == report["pass@k"]["mean"]
    assert report["maj@k (first k)"]["mean"] == [0.5, 0.5, 0.5]                       # problem 0's 1st answer wins
    expected = [np.mean([maj_at_k_expected(g.answers, g.correct, k) for g in first]) for k in (1, 2, 4)]
    assert report["maj@k (random k)"]["mean"] == pytest.approx(expected, abs=1e-15)
    # mean log-probs: problem 0 [-0.2, -0.1, -0.4, -4.5] -> the wrong sample is best; problem 1: the right one
    assert report["best-of-N@k (mean log-prob)"]["mean"][-1] == pytest.approx(0.5, abs=1e-15)
    assert set(report) == set(METRICS)
    for name in METRICS:
        assert all(lo <= m <= hi for lo, m, hi in zip(report[name]["low"], report[name]["mean"], report[name]["high"]))


def _tiny(vocab):
    torch.manual_seed(0)
    return build_model(HybridConfig(d_model=32, vocab_size=vocab, layers="gdn,attn", num_heads=2, mlp_ratio=2)).eval()


def test_run_tts_invariants_and_reproducibility():
    task = Modular(p=3)                                  # a random model is right about 1/4 of the time
    problems = task.problems(12, seed=0)
    settings = SamplingSettings(num_samples=8, temperature=1.5, max_new_tokens=1, batch_size=20, seed=3)
    heard = []
    a = run_tts(_tiny(4), task, problems, settings, num_resamples=100, report=heard.append)
    b = run_tts(_tiny(4), task, problems, settings, num_resamples=100)
    assert a == b
    assert heard == [f"sampling batch {b}/5 (completions {min(20 * b, 96)}/96) ..." for b in range(1, 6)]  # progress
    m = a["metrics"]
    mean_correct = np.mean([np.mean(s["correct"]) for s in a["samples"]])
    assert 0 < mean_correct < 1
    assert m["pass@k"]["mean"][0] == pytest.approx(mean_correct, abs=1e-15) == a["pass@1 by rule"]["first"]
    assert m["maj@k (random k)"]["mean"][0] == pytest.approx(mean_correct, abs=1e-15)   # one sample: no vote
    assert m["best-of-N@k (checker)"]["mean"] == m["pass@k"]["mean"]
    assert all(np.diff(m["pass@k"]["mean"]) >= 0) and a["ks"] == [1, 2, 4, 8]
    with pytest.raises(ValueError, match=r"every k must be in 1..n = 1..8 .* got \[16\]"):
        run_tts(_tiny(4), task, problems, settings, ks=[1, 16])


def _train_run(tmp_path, data, name="run"):
    cfg = {"name": name, "output_dir": str(tmp_path / "runs"), "seed": 0, "data": data,
           "model": {"hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}},
           "optim": {"lr": 3e-3}, "train": {"steps": 2, "batch_size": 8, "progress": False, "threads": 1}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["train", str(path)]) == 0
    return tmp_path / "runs" / name


def test_cli_on_a_run_folder_and_its_refusals(tmp_path, capsys):
    run = _train_run(tmp_path, {"kind": "chain_sum", "num_digits": 3, "num_train": 32, "num_eval": 8})
    out = tmp_path / "tts"
    args = ["probe", "tts", str(run), "--out", str(out), "--num-problems", "6", "--samples", "4", "--bootstrap", "50"]
    assert cli_main(args) == 0
    report = json.loads((out / "tts.json").read_text())
    assert report["problems"]["task"] == "chain_sum" and report["problems"]["problem_seed"] == 1   # data.eval_seed
    assert report["ks"] == [1, 2, 4] and (out / "tts.png").is_file()
    assert len((out / "samples.jsonl").read_text().splitlines()) == 6
    capsys.readouterr()
    assert cli_main(args) == 2 and "exists and is not empty" in capsys.readouterr().err
    assert cli_main(args + ["--overwrite", "--ks", "8"]) == 2
    assert "--ks 8 > --samples 4" in capsys.readouterr().err
    mqar = _train_run(tmp_path, {"kind": "mqar", "seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32,
                                 "num_train": 16, "num_eval": 4}, name="mqar")
    assert cli_main(["probe", "tts", str(mqar), "--out", str(tmp_path / "x")]) == 2
    assert "data.kind='mqar', which has no checker" in capsys.readouterr().err
    assert cli_main(["probe", "tts", str(run), "--task", "mqar", "--out", str(tmp_path / "y")]) == 2
    assert "tasks with a checker" in capsys.readouterr().err
    assert cli_main(["probe", "tts", str(tmp_path), "--task", "chain_sum", "--out", str(tmp_path / "z")]) == 2
    assert "is not a saved model" in capsys.readouterr().err
    assert cli_main(["probe", "tts", str(run), "--task", "graph_path", "--out", str(tmp_path / "w")]) == 2
    assert "the task uses 37 token ids but the model's vocabulary has 14" in capsys.readouterr().err


def test_cli_on_a_gsm8k_style_file(tmp_path):
    run = _train_run(tmp_path, {"kind": "files", "train_files": [str(_gsm(tmp_path))], "prompt_field": "question",
                                "response_field": "answer", "seq_len": 64})
    out = tmp_path / "gsm"
    assert cli_main(["probe", "tts", str(run), "--problems-file", str(_gsm(tmp_path)), "--out", str(out),
                     "--samples", "2", "--max-new-tokens", "8", "--rule", "strict", "--bootstrap", "20"]) == 0
    report = json.loads((out / "tts.json").read_text())
    assert report["num_problems"] == 2 and report["rule"] == "strict"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["reference"].endswith("#### 4")


def _gsm(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text('{"question": "2+2?", "answer": "2+2=4\\n#### 4"}\n{"question": "3+4?", "answer": "#### 7"}\n')
    return path
