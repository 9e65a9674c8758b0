"""Sequential test-time scaling: the round logic and the token count with a scripted policy, then the
whole `probe tts --mode both` on a tiny model."""
import json

import numpy as np
import pytest

from assocmem.cli import main as cli_main
from assocmem.probes.sequential_tts import run_sequential
from assocmem.training.text_files import ByteTokenizer
from assocmem.training.verifiable import TextAnswers
from assocmem.training.verifiable.verifiers import ExactMatch

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = ByteTokenizer()
REVISE, VERIFY = tuple(TOK.encode("|R|")), tuple(TOK.encode("|V|"))


def _task(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "2+2?", "answer": "#### 4"}\n{"question": "3+4?", "answer": "#### 7"}\n')
    return TextAnswers(path, tokenizer=TOK)


class Scripted:
    """Answers from a script per (question, number of revisions seen); logs every call."""

    def __init__(self, script, verdicts):
        self.script, self.verdicts, self.calls, self.asked = script, verdicts, [], {}

    def generate(self, prompts, seed):
        self.calls.append(("generate", len(prompts), seed))
        out = []
        for p in prompts:
            text = bytes(p).decode()
            assert text.count("|R|") <= 1 and 256 not in p      # only the latest response, without its EOS
            question = text.split("?")[0]
            self.asked[question] = self.asked.get(question, -1) + 1
            out.append(tuple(TOK.encode(self.script[question][self.asked[question]])) + (256,))
        return out

    def yes_scores(self, prompts):
        self.calls.append(("check", len(prompts)))
        return np.array([self.verdicts[bytes(t for t in p if t < 256).decode().split("####")[-1].split("|")[0].strip()]
                         for p in prompts])


def test_rounds_and_token_count_with_a_scripted_policy(tmp_path):
    task = _task(tmp_path)
    # problem "2+2": wrong, then right (accepted), never asked again; "3+4": wrong twice, then right
    script = {"2+2": ["#### 5", "#### 4"], "3+4": ["#### 1", "#### 2", "#### 7"]}
    verdicts = {"5": 0.1, "4": 0.9, "1": 0.2, "2": 0.4, "7": 0.8}
    policy = Scripted(script, verdicts)
    report = run_sequential(policy, task, task.problems(), chains=1, rounds=2, check="self", revise_ids=REVISE,
                            verify_ids=VERIFY, threshold=0.5, seed=10)
    assert report["accuracy"] == [0.0, 0.5, 1.0]
    # tokens per chain: "2+2": 7 ("#### 5" + EOS) + 1 check + 7 + 1 check = 16; it stops before round 2
    #                   "3+4": 7 + 1 + 7 + 1 + 7 = 23
    chains = report["chains_detail"]
    assert [h["tokens"] for h in chains[0]["rounds"]] == [7, 15, 16]
    assert [h["tokens"] for h in chains[1]["rounds"]] == [7, 15, 23]
    assert report["tokens"] == [7.0, 15.0, 19.5]
    assert report["stopped"] == [0.0, 0.0, 0.5]
    assert policy.calls == [("generate", 2, 10), ("check", 2), ("generate", 2, 11), ("check", 2), ("generate", 1, 12)]
    assert [h["answer"] for h in chains[1]["rounds"]] == ["1", "2", "7"]


def test_a_verifier_check_costs_no_policy_tokens(tmp_path):
    task = _task(tmp_path)
    policy = Scripted({"2+2": ["#### 4", "#### 9"], "3+4": ["#### 1", "#### 7"]}, {})
    report = run_sequential(policy, task, task.problems(), chains=1, rounds=1, check="verifier", revise_ids=REVISE,
                            verifier=ExactMatch())
    assert report["accuracy"] == [0.5, 1.0] and report["tokens"] == [7.0, 10.5]   # (7 + 14) / 2
    assert ("check", 2) not in policy.calls
    with pytest.raises(ValueError, match="check: verifier needs a verifier"):
        run_sequential(policy, task, task.problems(), chains=1, rounds=1, check="verifier", revise_ids=REVISE)


def test_probe_tts_both_modes_end_to_end(tmp_path):
    from test_test_time_scaling import _gsm, _train_run

    run = _train_run(tmp_path, {"kind": "files", "train_files": [str(_gsm(tmp_path))], "prompt_field": "question",
                                "response_field": "answer", "seq_len": 64})
    out = tmp_path / "both"
    assert cli_main(["probe", "tts", str(run), "--problems-file", str(_gsm(tmp_path)), "--out", str(out),
                     "--samples", "2", "--max-new-tokens", "6", "--bootstrap", "20", "--mode", "both", "--chains", "2",
                     "--rounds", "1", "--yes", "Y", "--no", "N", "--verifier", "correct"]) == 0
    report = json.loads((out / "tts.json").read_text())
    seq = report["sequential"]
    assert seq["rounds"] == [0, 1] and len(seq["accuracy"]) == 2 and seq["check"] == "self"
    assert report["tokens"] == [k * report["mean response tokens"] for k in report["ks"]]
    assert "best-of-N@k (verifier)" in report["metrics"]
    assert (out / "equal_compute.png").is_file() and (out / "sequential.jsonl").is_file()
    chains = [json.loads(line) for line in (out / "sequential.jsonl").read_text().splitlines()]
    assert len(chains) == 4
    for chain in chains:                          # round 1 adds one verdict token, then a revision unless stopped
        r0, r1 = chain["rounds"]
        assert 1 <= r0["tokens"] <= 6 and (r1["tokens"] == r0["tokens"] + 1) == (r1["score"] >= 0.5)
