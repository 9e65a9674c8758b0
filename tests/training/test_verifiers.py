"""Verifiers: exact match, numeric tolerance, a user's Python function, a judge model (a tiny random HF
model saved in the test), their weighted sums, and the config forms the RL run reads."""
import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from assocmem.training.rl.config import rl_config_from_dict
from assocmem.training.rl.rewards import reward_fn, score
from assocmem.training.text_files import ByteTokenizer, byte_tokenizer_fast
from assocmem.training.verifiable import TextAnswers
from assocmem.training.verifiable.judge import yes_scores
from assocmem.training.verifiable.verifiers import (ExactMatch, ModelJudge, NumericTolerance, PythonChecker,
                                                    compose)

pytestmark = pytest.mark.usefixtures("one_thread")


def _task(tmp_path, records, **kw):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in records))
    return TextAnswers(path, tokenizer=ByteTokenizer(), **kw)


def _responses(*texts):
    return [tuple(ByteTokenizer().encode(t) + [256]) for t in texts]


def test_exact_and_numeric(tmp_path):
    task = _task(tmp_path, [{"question": "q", "answer": "\\boxed{\\frac{1}{3}}"}], extractor="boxed")
    problems = task.problems()
    group = _responses("\\boxed{1/3}", "\\boxed{0.3333}", "\\boxed{0.34}", "no box")
    assert ExactMatch()(task, problems, [group]) == [[1.0, 0.0, 0.0, 0.0]]
    assert NumericTolerance(rel_tol=1e-3)(task, problems, [group]) == [[1.0, 1.0, 0.0, 0.0]]
    assert NumericTolerance(abs_tol=0.01)(task, problems, [group]) == [[1.0, 1.0, 1.0, 0.0]]
    assert NumericTolerance()(task, problems, [group]) == [[1.0, 0.0, 0.0, 0.0]]   # exact values only


def test_python_checker_from_an_explicit_folder_only(tmp_path):
    task = _task(tmp_path, [{"question": "q", "answer": "#### 12", "unit": "cm"}], metadata_fields=["unit"])
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "mine.py").write_text(
        "def grade(response, answer, info):\n"
        "    return float(answer == info['answer']) + 0.5 * (info['metadata']['unit'] in response)\n")
    checker = PythonChecker(function="mine:grade", path=str(tmp_path / "checks"))
    assert checker(task, task.problems(), [_responses("#### 12 cm", "#### 12", "#### 3 cm")]) == [[1.5, 1.0, 0.5]]
    model_folder = tmp_path / "model"
    model_folder.mkdir()
    (model_folder / "config.json").write_text("{}")
    (model_folder / "mine.py").write_text("def grade(r, a, i):\n    return 1.0\n")
    with pytest.raises(ValueError, match="lies in a model folder"):
        PythonChecker(function="mine:grade", path=str(model_folder)).fn
    with pytest.raises(ValueError, match="no module 'absent'"):
        PythonChecker(function="absent:grade", path=str(tmp_path / "checks")).fn
    with pytest.raises(ValueError, match="function must be 'module:function'"):
        PythonChecker(function="mine.grade", path=str(tmp_path))


def _judge_folder(tmp_path):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=512)
    folder = tmp_path / "judge"
    LlamaForCausalLM(cfg).save_pretrained(folder)
    byte_tokenizer_fast().save_pretrained(folder)
    return folder


def test_model_judge_reads_the_yes_odds(tmp_path):
    folder = _judge_folder(tmp_path)
    task = _task(tmp_path, [{"question": "2+2?", "answer": "#### 4"}, {"question": "3+4?", "answer": "#### 7"}])
    judge = ModelJudge(folder=str(folder), yes="Y", no="N", batch_size=3, device="cpu")
    responses = [_responses("#### 4", "#### 5"), _responses("#### 7 yes", "x")]
    scores = np.asarray(judge(task, task.problems(), responses))
    assert scores.shape == (2, 2) and np.all((scores > 0) & (scores < 1))
    model, tok = judge.loaded[0], judge.loaded[1]
    for i, (p, group) in enumerate(zip(task.problems(), responses)):      # one unpadded forward per response
        for j, r in enumerate(group):
            ids = torch.tensor([judge.prompt_ids(tok, p.info["question"], task.decode(r), p.info["answer"])])
            logits = model(input_ids=ids).logits[0, -1].double()
            want = torch.sigmoid(logits[ord("Y")] - logits[ord("N")]).item()
            assert scores[i, j] == pytest.approx(want, rel=1e-5)
    p_yes = yes_scores(model, [[1, 2, 3]], yes_id=ord("Y"), no_id=ord("N"), pad_id=0, score="p_yes")
    assert p_yes[0] == pytest.approx(torch.softmax(model(input_ids=torch.tensor([[1, 2, 3]])).logits[0, -1].double(),
                                                   -1)[ord("Y")].item(), rel=1e-6)
    with pytest.raises(ValueError, match="' Yes' encodes to 4 tokens"):
        ModelJudge(folder=str(folder)).loaded


def test_weights_compose_and_the_rl_config_reads_them(tmp_path):
    task = _task(tmp_path, [{"question": "q", "answer": "#### 4"}])
    group = [_responses("#### 4", "#### 4.001", "none")]
    fn = compose({"a": 2.0, "b": 0.5}, {"a": ExactMatch(), "b": NumericTolerance(abs_tol=0.01)})
    np.testing.assert_array_equal(fn(task, task.problems(), group), [[2.5, 0.5, 0.0]])
    out = score({"correct": 1.0, "states_an_answer": 0.25, "close": 1.0}, task, task.problems(), group,
                {"close": NumericTolerance(abs_tol=0.01)})
    np.testing.assert_array_equal(out, [[2.25, 1.25, 0.0]])
    with pytest.raises(ValueError, match="shadow registered rewards"):
        reward_fn("correct", {"correct": ExactMatch()})
    with pytest.raises(ValueError, match=r"unknown reward/verifier \['nope'\]"):
        reward_fn({"nope": 1.0})
    cfg = rl_config_from_dict({
        "model": {"hybrid": {"d_model": 16, "layers": "attn", "num_heads": 2}},
        "data": {"kind": "problems", "path": str(tmp_path / "p.jsonl")},
        "rollout": {"reward": {"correct": 1.0, "close": 0.5}, "verifiers": {"close": {"kind": "numeric", "abs_tol": 0.1}}},
        "train": {"steps": 1}})
    assert isinstance(cfg.rollout.verifiers["close"], NumericTolerance) and cfg.data.vocab_size == 257
    with pytest.raises(Exception, match="unknown reward/verifier"):
        rl_config_from_dict({"model": {"hybrid": {"d_model": 16, "layers": "attn", "num_heads": 2}},
                             "data": {"kind": "problems", "path": "x.jsonl"}, "rollout": {"reward": {"typo": 1.0}},
                             "train": {"steps": 1}})
