"""Problem files: the section's split, the chat template, clear refusals of files that are not
problem sets, and the three commands that read them (train = SFT rows, eval, rl)."""
import json

import pytest
import yaml

from assocmem.cli import main as cli_main
from assocmem.training.config import config_from_dict
from assocmem.training.text_files import ByteTokenizer, byte_tokenizer_fast
from assocmem.training.verifiable import ProblemsFile, TextAnswers, format_prompt, problem_sets

from test_verifiers import _judge_folder

pytestmark = pytest.mark.usefixtures("one_thread")

MATH = [{"problem": f"What is {i}/4?", "solution": f"It is $\\boxed{{\\frac{{{i}}}{{4}}}}$.", "level": i % 3}
        for i in range(1, 7)]


def _write(tmp_path, records, name="math.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_split_metadata_and_answers(tmp_path):
    data = ProblemsFile(path=str(_write(tmp_path, MATH)), prompt_field="problem", answer_field="solution",
                        extractor="boxed", num_eval=2, num_train=3, metadata_fields=["level"])
    train, held_out = problem_sets(data)
    assert [p.info["answer"] for p in train] == ["0.25", "0.5", "0.75"]
    assert [p.info["answer"] for p in held_out] == ["1.25", "1.5"]
    assert train[0].info["metadata"] == {"level": 1} and train[0].info["question"] == "What is 1/4?"
    assert data.default_rule == "last" and data.vocab_size == 257
    assert data.candidates(ByteTokenizer().encode("\\boxed{1} no \\boxed{\\dfrac{1}{4}}")) == ["1", "0.25"]
    with pytest.raises(ValueError, match="give eval_path or num_eval"):
        ProblemsFile(path="x.jsonl", eval_path="y.jsonl", num_eval=2)
    with pytest.raises(ValueError, match="unknown answer extractor 'latex'"):
        ProblemsFile(path="x.jsonl", extractor="latex")


def test_chat_template_when_the_tokenizer_has_one():
    tok = byte_tokenizer_fast()
    assert format_prompt(tok, "2+2?", template="Q: {prompt}") == "Q: 2+2?"          # no template: plain text
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    assert format_prompt(tok, "2+2?", system_prompt="Be brief.") == "<system>Be brief.<user>2+2?<assistant>"
    assert format_prompt(tok, "2+2?", chat_template="off") == "2+2?"
    with pytest.raises(ValueError, match="chat_template: on, but the tokenizer"):
        format_prompt(ByteTokenizer(), "2+2?", chat_template="on")


def test_files_that_are_not_problem_sets_are_named(tmp_path):
    tok = ByteTokenizer()
    text = tmp_path / "notes.txt"
    text.write_text("just prose\n")
    with pytest.raises(ValueError, match=r"notes.txt is not a problem set .*no field \['question', 'answer'\]"):
        TextAnswers(text, tokenizer=tok)
    numbers = _write(tmp_path, [{"question": "q", "answer": "#### 1"}, {"question": "q", "answer": 7}], "n.jsonl")
    with pytest.raises(ValueError, match=r"n.jsonl record 1 \(0-based\): field 'answer' is int 7, not text"):
        TextAnswers(numbers, tokenizer=tok)
    bare = _write(tmp_path, [{"question": "q", "answer": "42"}], "bare.jsonl")
    with pytest.raises(ValueError, match=r"bare.jsonl record 0 \(0-based\), field 'answer': .*'whole' for a bare"):
        TextAnswers(bare, tokenizer=tok)
    assert TextAnswers(bare, tokenizer=tok, reference_extractor="whole").problems()[0].info["answer"] == "42"


def test_sft_then_eval_then_rl_on_a_problem_file(tmp_path):
    path = _write(tmp_path, MATH)
    section = {"kind": "problems", "path": str(path), "prompt_field": "problem", "answer_field": "solution",
               "extractor": "boxed", "num_eval": 2, "max_new_tokens": 8}
    cfg = {"name": "sft", "output_dir": str(tmp_path / "runs"), "seed": 0, "data": section,
           "model": {"hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}},
           "optim": {"lr": 3e-3}, "train": {"steps": 2, "batch_size": 4, "progress": False, "threads": 1}}
    rows = config_from_dict(cfg).data
    assert rows.row_length == max(len(p.prompt) + len(p.reference) for part in rows.split() for p in part)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(cfg))
    assert cli_main(["train", str(tmp_path / "sft.yaml")]) == 0
    run = tmp_path / "runs" / "sft"
    assert cli_main(["eval", str(run), "--problems", str(path), "--set", "data.prompt_field=problem",
                     "--set", "data.answer_field=solution", "--set", "data.extractor=boxed",
                     "--set", "data.max_new_tokens=6", "--json", str(tmp_path / "e.json")]) == 0
    metrics = json.loads((tmp_path / "e.json").read_text())
    assert metrics["num_problems"] == 6 and 0 <= metrics["answer_accuracy"] <= metrics["answered"] <= 1
    rl = {"name": "rl", "output_dir": str(tmp_path / "runs"), "model": {"init_from": str(run)}, "data": section,
          "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6,
                      "reward": {"correct": 1.0, "close": 0.5, "states_an_answer": 0.1, "judge": 0.2},
                      "verifiers": {"close": {"kind": "numeric", "abs_tol": 0.3},
                                    "judge": {"kind": "model", "folder": str(_judge_folder(tmp_path)), "yes": "Y",
                                              "no": "N", "device": "cpu"}}},
          "train": {"steps": 1, "progress": False, "threads": 1, "eval_samples": 1}}
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(rl))
    assert cli_main(["rl", str(tmp_path / "rl.yaml")]) == 0
    log = [json.loads(line) for line in (tmp_path / "runs" / "rl" / "log.jsonl").read_text().splitlines()]
    assert [r["split"] for r in log] == ["eval", "train", "eval"] and 0 < log[1]["reward"] < 1.8   # the judge's term is > 0
