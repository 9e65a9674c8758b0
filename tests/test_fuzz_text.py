"""Fuzz the text surfaces (issues 35, 37, 38): problem files, verifiers, sequential test-time scaling,
data mixtures and stages, recipes, latent attention and the Newton optimizer.

Each case is a bad input a new user could give. Every one must end in one clear error: exit status 2
from the command line (argparse's own refusals too), the field, flag, file or record named in the
message, no raw traceback, nothing left behind in the run folder, and no code from a model folder run.
Cases are generated from what the code declares (pydantic fields and bounds) where it declares it, and
listed by hand where the bad input is a file.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from assocmem.cli import main as cli_main
from assocmem.mixers import MixerSpec, get_preset
from assocmem.training.config import ConfigError, config_from_dict
from assocmem.training.verifiable import ProblemsFile

from test_fuzz import bad_values, field_cases

pytestmark = pytest.mark.usefixtures("one_thread")

GSM = [{"question": f"What is {i} + {i}?", "answer": f"{i} plus {i} is {2 * i}.\n#### {2 * i}"} for i in range(1, 7)]
MODEL = {"hybrid": {"d_model": 16, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}}
LOOP = {"progress": False, "threads": 1}


def _jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _cli(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of ``assocmem ARGV`` run in-process; argparse's exits become their status."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli_main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
            if not isinstance(exit_.code, int):
                err.write(str(exit_.code))
    return code, err.getvalue()


def _refused(argv: list[str], *named: str) -> str:
    code, err = _cli(argv)
    assert code == 2, (code, err)
    assert "Traceback" not in err, err
    for word in named:
        assert word in err, (word, err)
    return err


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder with a good problem file and a run folder SFT-trained on it for 2 steps (eval, tts, rl use it)."""
    import torch

    root = tmp_path_factory.mktemp("fuzz_text")
    good = _jsonl(root / "gsm.jsonl", GSM)
    cfg = {"name": "sft", "output_dir": str(root / "runs"), "seed": 0, "model": MODEL,
           "data": {"kind": "problems", "path": str(good), "num_eval": 2, "max_new_tokens": 4},
           "optim": {"lr": 3e-3}, "train": {"steps": 2, "batch_size": 4, **LOOP}}
    (root / "sft.yaml").write_text(yaml.safe_dump(cfg))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert cli_main(["train", str(root / "sft.yaml")]) == 0
    finally:
        torch.set_num_threads(before)
    return root


# ============================================================================ problem files
def _problems_config(tmp_path: Path, data: dict) -> dict:
    return {"name": "p", "output_dir": str(tmp_path / "runs"), "seed": 0, "model": MODEL, "data": data,
            "optim": {"lr": 1e-3}, "train": {"steps": 1, "batch_size": 2, **LOOP}}


SECTION_CASES = [c for c in field_cases(ProblemsFile, "data") if c[1] != "kind"] + [
    ("data.extractor", "extractor", "latex"), ("data.extractor", "extractor", 3),
    ("data.reference_extractor", "reference_extractor", "regex"),
    ("data.chat_template", "chat_template", "maybe"), ("data.chat_template", "chat_template", 2),
    ("data.prompt_template", "prompt_template", "Q: {question}"), ("data.prompt_template", "prompt_template", 5),
    ("data.prompt_field", "prompt_field", ["question"]), ("data.metadata_fields", "metadata_fields", "level"),
    ("data.path", "path", None), ("data.nonsense", "nonsense", 1),
    ("data.prompt_template", "prompt_template", "{prompt} {x}"), ("data.prompt_template", "prompt_template", "{prompt} {}"),
    ("data.prompt_template", "prompt_template", "{prompt} }"), ("data.prompt_template", "prompt_template", "{prompt!z}")]


@pytest.mark.parametrize("key,name,value", SECTION_CASES, ids=[f"{k}={v!r}"[:50] for k, _, v in SECTION_CASES])
def test_a_bad_problems_section_is_refused_naming_the_field(tmp_path, key, name, value):
    data = {"kind": "problems", "path": "gsm.jsonl", "num_eval": 1}
    data[key.split(".", 1)[1]] = value
    with pytest.raises(ConfigError) as err:
        config_from_dict(_problems_config(tmp_path, data))
    assert name in str(err.value), str(err.value)


def _bad_files(root: Path) -> list[tuple[str, Path, list[str]]]:
    """(case, file, words its refusal must hold): files that are not problem sets."""
    def write(name, content):
        path = root / name
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        return path

    rec = lambda **kw: json.dumps({"question": "What is 1 + 1?", "answer": "#### 2", **kw}) + "\n"
    return [
        ("empty", write("empty.jsonl", ""), ["empty.jsonl", "empty"]),
        ("blank_lines", write("blank.jsonl", "\n\n\n"), ["blank.jsonl"]),
        ("not_json", write("prose.jsonl", "What is 1 + 1?\n"), ["prose.jsonl", "line 1"]),
        ("half_json", write("half.jsonl", rec() + '{"question": "x", "answer": \n'), ["half.jsonl", "line 2"]),
        ("binary", write("bin.jsonl", b"\x00\x01\x02\xff" * 10), ["bin.jsonl", "line 1"]),
        ("latin1", write("latin.jsonl", rec().encode() + '{"question": "caf\u00e9", "answer": "#### 1"}\n'
                         .encode("latin-1")), ["latin.jsonl", "line 2", "UTF-8"]),
        ("list_record", write("list.jsonl", "[1, 2]\n"), ["list.jsonl", "record 0"]),
        ("json_scalar", write("scalar.json", "42"), ["scalar.json"]),
        ("json_empty_list", write("none.json", "[]"), ["none.json", "no record"]),
        ("no_prompt_field", write("noq.jsonl", json.dumps({"problem": "x", "answer": "#### 1"}) + "\n"),
         ["noq.jsonl", "question", "prompt_field"]),
        ("no_answer_field", write("noa.jsonl", json.dumps({"question": "x", "solution": "#### 1"}) + "\n"),
         ["noa.jsonl", "answer"]),
        ("answer_int", write("int.jsonl", rec() + json.dumps({"question": "x", "answer": 7}) + "\n"),
         ["int.jsonl", "record 1", "answer"]),
        ("answer_null", write("null.jsonl", rec() + json.dumps({"question": "x", "answer": None}) + "\n"),
         ["null.jsonl", "record 1", "answer"]),
        ("question_list", write("qlist.jsonl", json.dumps({"question": ["a", "b"], "answer": "#### 1"}) + "\n"),
         ["qlist.jsonl", "record 0", "question"]),
        ("question_dict", write("qdict.jsonl", json.dumps({"question": {"a": 1}, "answer": "#### 1"}) + "\n"),
         ["qdict.jsonl", "question"]),
        ("mixed_types", write("mixed.jsonl", rec() + json.dumps({"question": 3, "answer": "#### 1"}) + "\n"),
         ["mixed.jsonl", "question"]),
        ("no_answer_in_reference", write("bare.jsonl", json.dumps({"question": "x", "answer": "42"}) + "\n"),
         ["bare.jsonl", "record 0", "reference_extractor"]),
        ("two_answers", write("two.jsonl", json.dumps({"question": "x", "answer": "#### 1\n#### 2"}) + "\n"),
         ["two.jsonl", "record 0", "one answer"]),
        ("empty_prompt", write("emptyq.jsonl", json.dumps({"question": "", "answer": "#### 1"}) + "\n"),
         ["emptyq.jsonl", "record 0", "question"]),
        ("csv_suffix", write("probs.csv", "question,answer\nx,#### 1\n"), ["probs.csv", ".jsonl"]),
        ("bad_parquet", write("bad.parquet", b"PAR1 not really"), ["bad.parquet"]),
        ("missing", root / "missing.jsonl", ["missing.jsonl"]),
        ("directory", root, [root.name]),
    ]


BAD_FILE_IDS = [
    "empty", "blank_lines", "not_json", "half_json", "binary", "latin1", "list_record", "json_scalar",
    "json_empty_list", "no_prompt_field", "no_answer_field", "answer_int", "answer_null", "question_list",
    "question_dict", "mixed_types", "no_answer_in_reference", "two_answers", "empty_prompt", "csv_suffix",
    "bad_parquet", "missing", "directory"]


def _bad_file(tmp_path: Path, case: str) -> tuple[Path, list[str]]:
    return next((path, words) for name, path, words in _bad_files(tmp_path) if name == case)


@pytest.mark.parametrize("case", BAD_FILE_IDS)
def test_probe_tts_refuses_a_bad_problems_file_naming_it(work, tmp_path, case):
    path, words = _bad_file(tmp_path, case)
    _refused(["probe", "tts", str(work / "runs" / "sft"), "--problems-file", str(path), "--samples", "1",
              "--max-new-tokens", "2", "--bootstrap", "2", "--out", str(tmp_path / "out")], *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", BAD_FILE_IDS[::3])
def test_eval_refuses_a_bad_problems_file_naming_it(work, tmp_path, case):
    path, words = _bad_file(tmp_path, case)
    _refused(["eval", str(work / "runs" / "sft"), "--problems", str(path), "--json", str(tmp_path / "e.json")],
             *words)
    assert not (tmp_path / "e.json").exists()


@pytest.mark.parametrize("case", BAD_FILE_IDS[1::3])
def test_train_refuses_a_bad_problems_file_and_leaves_nothing(tmp_path, case):
    path, words = _bad_file(tmp_path, case)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_problems_config(tmp_path, {"kind": "problems", "path": str(path)})))
    _refused(["train", str(config)], *words)
    assert not (tmp_path / "runs" / "p").exists()


@pytest.mark.parametrize("case", BAD_FILE_IDS[2::3])
def test_rl_refuses_a_bad_problems_file_and_leaves_nothing(work, tmp_path, case):
    path, words = _bad_file(tmp_path, case)
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(_rl_config(work, tmp_path, data={"kind": "problems", "path": str(path)})))
    _refused(["rl", str(config)], *words)
    assert not (tmp_path / "runs" / "rl").exists()


def _rl_config(work: Path, tmp_path: Path, *, data: dict | None = None, rollout: dict | None = None) -> dict:
    return {"name": "rl", "output_dir": str(tmp_path / "runs"), "model": {"init_from": str(work / "runs" / "sft")},
            "data": data or {"kind": "problems", "path": str(work / "gsm.jsonl"), "num_eval": 2, "max_new_tokens": 3},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3, **(rollout or {})},
            "train": {"steps": 1, "eval_samples": 1, **LOOP}}


@pytest.mark.parametrize("overrides,named", [
    (["data.num_eval=6"], ["num_eval=6", "leaves none"]),
    (["data.num_eval=100"], ["num_eval=100"]),
    (["data.eval_path=nowhere.jsonl", "data.num_eval=0"], ["nowhere.jsonl"]),
    (["data.tokenizer=no/such/folder"], ["tokenizer"]),
    (["data.chat_template=on"], ["chat_template"]),
    (["data.extractor=boxed"], ["record 0", "boxed"]),
    (["data.prompt_field=problem"], ["problem", "prompt_field"]),
    (["data.metadata_fields=[level]"], ["level"]),
    (["data.num_train=100"], ["data.num_train=100", "gsm.jsonl"]),
    (["data.num_eval=2", "data.num_train=5"], ["data.num_train=5", "num_eval=2"]),
    (["data.tokenizer=" + __file__], ["tokenizer"]),
], ids=lambda v: str(v)[:40])
def test_train_on_a_problem_file_with_bad_options(work, tmp_path, overrides, named):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_problems_config(tmp_path, {"kind": "problems", "path": str(work / "gsm.jsonl")})))
    _refused(["train", str(config), *[a for o in overrides for a in ("--set", o)]], *named)
    assert not (tmp_path / "runs" / "p").exists()


@pytest.mark.parametrize("flags,named", [
    (["--extractor", "latex"], ["latex", "extractor"]),
    (["--reference-extractor", "regex"], ["regex", "extractor"]),
    (["--prompt-template", "Q: {question}"], ["prompt_template", "{prompt}"]),
    (["--prompt-template", "Q: {prompt"], ["prompt"]),
    (["--prompt-template", "Q: {prompt} {x}"], ["prompt_template", "{x}"]),
    (["--prompt-template", "Q: {prompt} }"], ["prompt_template"]),
    (["--chat-template", "always"], ["--chat-template"]),
    (["--chat-template", "on"], ["chat_template"]),
    (["--tokenizer", "no/such/folder"], ["tokenizer"]),
    (["--prompt-field", "problem"], ["problem", "prompt_field"]),
    (["--metadata-field", "level"], ["level"]),
    (["--num-problems", "0"], ["--num-problems"]),
    (["--num-problems", "-3"], ["--num-problems"]),
    (["--max-new-tokens", "0"], ["--max-new-tokens"]),
    (["--samples", "2", "--ks", "4"], ["--ks"]),
    (["--bootstrap", "0"], ["--bootstrap"]),
    (["--task", "chain_sum", "--problems-file", "x.jsonl", "--mode", "sequential"], []),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_probe_tts_problem_flags(work, tmp_path, flags, named):
    argv = ["probe", "tts", str(work / "runs" / "sft"), "--problems-file", str(work / "gsm.jsonl"), "--samples", "1",
            "--max-new-tokens", "2", "--bootstrap", "2", "--out", str(tmp_path / "out"), *flags]
    _refused(argv, *named)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides,named", [
    (["data.extractor=latex"], ["extractor", "latex"]),
    (["data.chat_template=yes"], ["chat_template"]),
    (["data.prompt_field=problem"], ["problem"]),
    (["data.max_new_tokens=0"], ["max_new_tokens"]),
    (["data.max_new_tokens=-5"], ["max_new_tokens"]),
    (["data.num_eval=1e40"], ["num_eval"]),
], ids=lambda v: str(v)[:40])
def test_eval_problem_overrides(work, tmp_path, overrides, named):
    _refused(["eval", str(work / "runs" / "sft"), "--problems", str(work / "gsm.jsonl"),
              *[a for o in overrides for a in ("--set", o)], "--json", str(tmp_path / "e.json")], *named)


# ============================================================================ verifiers
def _judge(root: Path, name: str = "judge") -> Path:
    """A tiny local Llama judge folder with the byte tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from assocmem.training.text_files import byte_tokenizer_fast

    torch.manual_seed(0)
    folder = root / name
    cfg = LlamaConfig(vocab_size=257, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=256)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    byte_tokenizer_fast().save_pretrained(folder)
    return folder


def _remote_code_judge(root: Path) -> tuple[Path, Path]:
    """A judge folder whose config.json asks for custom code (evil.py writes a marker when imported)."""
    folder = _judge(root, "remote")
    marker = root / "code_ran"
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                    "from transformers import LlamaConfig as EvilConfig, LlamaForCausalLM as EvilModel\n")
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    tok["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    return folder, marker


def _checkers(root: Path) -> Path:
    """A folder of user checker modules, each bad in one way."""
    folder = root / "checks"
    folder.mkdir()
    (folder / "good.py").write_text("def grade(text, answer, info):\n    return 1.0\n")
    (folder / "raises.py").write_text("def grade(text, answer, info):\n    raise RuntimeError('boom in grade')\n")
    (folder / "divides.py").write_text("def grade(text, answer, info):\n    return 1 / 0\n")
    (folder / "text.py").write_text("def grade(text, answer, info):\n    return 'yes'\n")
    (folder / "nan.py").write_text("def grade(text, answer, info):\n    return float('nan')\n")
    (folder / "none.py").write_text("def grade(text, answer, info):\n    return None\n")
    (folder / "arity.py").write_text("def grade(text):\n    return 1.0\n")
    (folder / "broken.py").write_text("def grade(text, answer, info) return 1\n")
    (folder / "imports.py").write_text("import no_such_module_anywhere\ndef grade(t, a, i):\n    return 1.0\n")
    (folder / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (folder / "constant.py").write_text("grade = 3\n")
    return folder


VERIFIER_SPEC_CASES = [  # (case, --verifier-spec YAML, words of the refusal)
    ("unknown_kind", "{kind: regex}", ["kind", "regex"]),
    ("no_kind", "{folder: x}", ["kind"]),
    ("not_a_mapping", "[1, 2]", ["--verifier-spec"]),
    ("bad_yaml", "{kind: [", ["--verifier-spec"]),
    ("numeric_negative_tol", "{kind: numeric, rel_tol: -1}", ["rel_tol"]),
    ("numeric_nan_tol", "{kind: numeric, abs_tol: .nan}", ["abs_tol"]),
    ("numeric_text_tol", "{kind: numeric, abs_tol: close}", ["abs_tol"]),
    ("numeric_bad_rule", "{kind: numeric, rule: middle}", ["rule"]),
    ("exact_extra_key", "{kind: exact_match, tolerance: 1}", ["tolerance"]),
    ("python_no_function", "{kind: python, path: .}", ["function"]),
    ("python_bad_function", "{kind: python, function: 'grade', path: .}", ["function", "module:function"]),
    ("python_dotted_path", "{kind: python, function: '../x:grade', path: .}", ["function"]),
    ("model_no_folder", "{kind: model}", ["folder"]),
    ("model_template", "{kind: model, folder: j, template: 'no slot'}", ["{response}"]),
    ("model_batch_zero", "{kind: model, folder: j, batch_size: 0}", ["batch_size"]),
    ("model_score", "{kind: model, folder: j, score: logits}", ["score"]),
    ("model_device", "{kind: model, folder: j, device: tpu}", ["device"]),
]


def _tts(work: Path, tmp_path: Path, *flags: str) -> list[str]:
    return ["probe", "tts", str(work / "runs" / "sft"), "--problems-file", str(work / "gsm.jsonl"), "--samples", "1",
            "--num-problems", "2", "--max-new-tokens", "2", "--bootstrap", "2", "--out", str(tmp_path / "out"), *flags]


@pytest.mark.parametrize("case,spec,named", VERIFIER_SPEC_CASES, ids=[c for c, _, _ in VERIFIER_SPEC_CASES])
def test_probe_tts_refuses_a_bad_verifier_spec(work, tmp_path, case, spec, named):
    _refused(_tts(work, tmp_path, "--verifier", "mine", "--verifier-spec", f"mine={spec}"), *named)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case,spec,named", VERIFIER_SPEC_CASES[::2], ids=[c for c, _, _ in VERIFIER_SPEC_CASES[::2]])
def test_rl_refuses_a_bad_verifier_spec(work, tmp_path, case, spec, named):
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(_rl_config(work, tmp_path, rollout={"reward": {"mine": 1.0}})))
    _refused(["rl", str(config), "--set", f"rollout.verifiers.mine={spec}"], *[n for n in named if n != "--verifier-spec"])
    assert not (tmp_path / "runs" / "rl").exists()


@pytest.mark.parametrize("flags,named", [
    (["--verifier", "nosuch"], ["nosuch"]),
    (["--verifier", "correct=abc"], ["--verifier", "correct=abc"]),
    (["--verifier", "correct=nan"], ["correct", "finite"]),
    (["--verifier", "correct=inf"], ["correct", "finite"]),
    (["--verifier", "correct=-inf"], ["correct", "finite"]),
    (["--verifier", "=1"], ["--verifier"]),
    (["--verifier-spec", "mine={kind: numeric}"], ["--verifier-spec", "mine"]),
    (["--verifier-spec", "nothing-here"], ["--verifier-spec"]),
    (["--verifier", "correct", "--verifier-spec", "correct={kind: numeric}"], ["correct", "shadow"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_probe_tts_refuses_bad_verifier_weights(work, tmp_path, flags, named):
    _refused(_tts(work, tmp_path, *flags), *named)


@pytest.mark.parametrize("reward,named", [
    ({"correct": float("nan")}, ["reward"]), ({"correct": "abc"}, ["reward"]), ({"correct": float("inf")}, ["reward"]),
    ({"nosuch": 1.0}, ["nosuch"]), ({}, ["reward"]), ("nosuch", ["nosuch"]), ([1, 2], ["reward"]),
], ids=lambda v: str(v)[:30])
def test_rl_refuses_bad_reward_weights(work, tmp_path, reward, named):
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(_rl_config(work, tmp_path, rollout={"reward": reward})))
    _refused(["rl", str(config)], *named)
    assert not (tmp_path / "runs" / "rl").exists()


PYTHON_CASES = [  # (module:function, words): the checker folder holds these modules
    ("missing:grade", ["missing", "checks"]), ("good:nothing", ["nothing"]), ("raises:grade", ["raises:grade", "boom"]),
    ("divides:grade", ["divides:grade", "ZeroDivisionError"]), ("text:grade", ["text:grade", "str"]),
    ("nan:grade", ["nan"]), ("none:grade", ["none:grade", "NoneType"]), ("arity:grade", ["arity:grade"]),
    ("broken:grade", ["broken", "SyntaxError"]), ("imports:grade", ["imports", "no_such_module_anywhere"]),
    ("exits:grade", ["exits"]), ("constant:grade", ["grade"]),
]


@pytest.mark.parametrize("function,named", PYTHON_CASES, ids=[f for f, _ in PYTHON_CASES])
def test_probe_tts_names_a_python_checker_that_fails(work, tmp_path, function, named):
    checks = _checkers(tmp_path)
    _refused(_tts(work, tmp_path, "--verifier", "mine",
                  "--verifier-spec", f"mine={{kind: python, function: '{function}', path: '{checks}'}}"), *named)


def test_python_checker_path_that_does_not_exist_or_is_a_model_folder(work, tmp_path):
    _refused(_tts(work, tmp_path, "--verifier", "mine", "--verifier-spec",
                  f"mine={{kind: python, function: 'good:grade', path: '{tmp_path / 'nowhere'}'}}"), "nowhere")
    judge = _judge(tmp_path)
    marker = tmp_path / "checker_ran"
    (judge / "grade_mod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef grade(t, a, i):\n    return 1\n")
    _refused(_tts(work, tmp_path, "--verifier", "mine", "--verifier-spec",
                  f"mine={{kind: python, function: 'grade_mod:grade', path: '{judge}'}}"), str(judge), "model folder")
    assert not marker.exists()
    sub = judge / "sub"
    sub.mkdir()
    (sub / "grade_mod.py").write_text((judge / "grade_mod.py").read_text())
    _refused(_tts(work, tmp_path, "--verifier", "mine", "--verifier-spec",
                  f"mine={{kind: python, function: 'grade_mod:grade', path: '{sub}'}}"), "model folder")
    assert not marker.exists()


@pytest.mark.parametrize("case", ["missing", "empty", "file", "weights_only", "remote_code", "yes_two_tokens",
                                  "no_empty", "yes_equals_no"])
def test_probe_tts_refuses_a_bad_model_judge_naming_the_folder(work, tmp_path, case):
    yes, no, named = "Y", "N", []
    if case == "missing":
        folder, named = tmp_path / "nojudge", ["nojudge"]
    elif case == "empty":
        folder = tmp_path / "emptyjudge"
        folder.mkdir()
        named = ["emptyjudge"]
    elif case == "file":
        folder = tmp_path / "judge.txt"
        folder.write_text("hi")
        named = ["judge.txt"]
    elif case == "weights_only":
        folder = _judge(tmp_path)
        (folder / "config.json").unlink()
        named = [str(folder)]
    elif case == "remote_code":
        folder, marker = _remote_code_judge(tmp_path)
        named = [str(folder)]
    else:
        folder = _judge(tmp_path)
        yes, no, named = {"yes_two_tokens": ("Yes", "N", ["yes", "'Yes'"]), "no_empty": ("Y", "", ["no"]),
                          "yes_equals_no": ("Y", "Y", ["yes", "no"])}[case]
    spec = f"judge={{kind: model, folder: '{folder}', yes: '{yes}', no: '{no}', device: cpu}}"
    _refused(_tts(work, tmp_path, "--verifier", "judge", "--verifier-spec", spec), *named)
    if case == "remote_code":
        assert not marker.exists()
    assert not (tmp_path / "out").exists() or case in ("yes_equals_no",)


@pytest.mark.parametrize("case", ["missing_folder", "not_a_model", "remote_code", "checker_raises", "checker_missing"])
def test_rl_refuses_a_verifier_that_does_not_load_and_leaves_nothing(work, tmp_path, case):
    if case in ("checker_raises", "checker_missing"):
        checks = _checkers(tmp_path)
        module = {"checker_raises": "broken:grade", "checker_missing": "absent:grade"}[case]
        spec, named = {"kind": "python", "function": module, "path": str(checks)}, ["rollout.verifiers.mine"]
    else:
        folder = {"missing_folder": tmp_path / "nojudge", "not_a_model": tmp_path}.get(case)
        if case == "remote_code":
            folder, marker = _remote_code_judge(tmp_path)
        spec, named = {"kind": "model", "folder": str(folder), "yes": "Y", "no": "N"}, ["rollout.verifiers.mine", str(folder)]
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump(_rl_config(work, tmp_path, rollout={"reward": {"correct": 1, "mine": 0.5},
                                                                          "verifiers": {"mine": spec}})))
    _refused(["rl", str(config)], *named)
    assert not (tmp_path / "runs" / "rl").exists()
    if case == "remote_code":
        assert not marker.exists()


def test_the_documented_judge_and_chat_template_yaml_read_as_written(tmp_path):
    """`{yes: " Yes", no: " No"}` and `chat_template: on` in YAML (1.1 reads yes/no/on/off as booleans)."""
    from pydantic import TypeAdapter

    from assocmem.mixers.yaml_text import load_yaml
    from assocmem.training.verifiable.verifiers import VerifierSpec

    spec = TypeAdapter(VerifierSpec).validate_python(load_yaml(
        '{kind: model, folder: judges/small, yes: " Yes", no: " No", chat_template: off}', source="x"))
    assert (spec.yes, spec.no, spec.chat_template) == (" Yes", " No", "off")
    data = config_from_dict(_problems_config(tmp_path, load_yaml("{kind: problems, path: p.jsonl, chat_template: on}",
                                                                 source="x"))).data
    assert data.chat_template == "on"
    assert load_yaml("{on: 1, off: 2, true: 3}", source="x") == {"on": 1, "off": 2, True: 3}


# ============================================================================ sequential test-time scaling
SEQUENTIAL_FLAGS = [  # (flags, words of the refusal)
    (["--chains", "0"], ["--chains"]), (["--chains", "-2"], ["--chains"]), (["--chains", "1.5"], ["--chains"]),
    (["--rounds", "-1"], ["--rounds"]), (["--rounds", "two"], ["--rounds"]),
    (["--threshold", "nan"], ["--threshold"]), (["--threshold", "inf"], ["--threshold"]),
    (["--threshold", "1.5"], ["--threshold"]), (["--threshold", "-0.2"], ["--threshold"]),
    (["--check", "judge"], ["--check"]), (["--mode", "serial"], ["--mode"]),
    (["--check", "verifier"], ["--verifier"]),
    (["--yes", "Yes"], ["--yes"]), (["--no", ""], ["--no"]), (["--yes", "Y", "--no", "Y"], ["--yes", "--no"]),
    (["--verifier", "correct", "--check", "verifier", "--rounds", "1", "--threshold", "nan"], ["--threshold"]),
]
SEQUENTIAL_CASES = ([("sequential", f, n) for f, n in SEQUENTIAL_FLAGS]
                    + [("both", f, n) for f, n in SEQUENTIAL_FLAGS if f[0] not in ("--chains", "--rounds", "--mode")])


@pytest.mark.parametrize("mode,flags,named", SEQUENTIAL_CASES, ids=[f"{m} {' '.join(f)}" for m, f, _ in SEQUENTIAL_CASES])
def test_probe_tts_sequential_flags_are_refused_before_anything_runs(work, tmp_path, mode, flags, named):
    _refused(_tts(work, tmp_path, "--mode", mode, "--yes", "Y", "--no", "N", *flags), *named)
    assert not (tmp_path / "out").exists()


def test_probe_tts_sequential_needs_text_problems(work, tmp_path):
    _refused(["probe", "tts", str(work / "runs" / "sft"), "--task", "chain_sum", "--task-param", "num_digits=2",
              "--mode", "sequential", "--samples", "1", "--num-problems", "2", "--max-new-tokens", "2",
              "--out", str(tmp_path / "out")], "--problems-file")
    assert not (tmp_path / "out").exists()


# ============================================================================ mixtures and stages
def _mixture(**data) -> dict:
    base = {"kind": "mixture", "tokenizer": "bytes", "seq_len": 32,
            "sources": {"math": {"files": ["corpus:math.jsonl"], "text_field": ["question", "answer"]},
                        "prose": {"files": ["corpus:prose.txt"], "sample_by": "paragraph"}},
            "weights": {"math": 1, "prose": 1}}
    return {**base, **data}


MIXTURE_CASES = [  # (case, data section changes, words in the refusal)
    ("weight_negative", {"weights": {"math": -1, "prose": 1}}, ["data.weights", "math"]),
    ("weights_all_zero", {"weights": {"math": 0, "prose": 0}}, ["data.weights"]),
    ("weights_empty", {"weights": {}}, ["data.weights"]),
    ("weight_nan", {"weights": {"math": math.nan, "prose": 1}}, ["weights"]),
    ("weight_inf", {"weights": {"math": math.inf, "prose": 1}}, ["weights"]),
    ("weight_text", {"weights": {"math": "lots", "prose": 1}}, ["weights"]),
    ("weight_unknown_source", {"weights": {"code": 1}}, ["data.weights", "code"]),
    ("weights_a_list", {"weights": [1, 1]}, ["weights"]),
    ("seq_len_zero", {"seq_len": 0}, ["seq_len"]), ("seq_len_one", {"seq_len": 1}, ["seq_len"]),
    ("seq_len_negative", {"seq_len": -8}, ["seq_len"]), ("seq_len_float", {"seq_len": 31.5}, ["seq_len"]),
    ("stage_step_zero", {"stages": [{"step": 0}]}, ["stages", "step"]),
    ("stage_step_negative", {"stages": [{"step": -3}]}, ["stages", "step"]),
    ("stages_equal", {"stages": [{"step": 5}, {"step": 5}]}, ["data.stages[1].step=5"]),
    ("stages_decreasing", {"stages": [{"step": 5}, {"step": 3}]}, ["data.stages[1].step=3"]),
    ("stage_seq_len_zero", {"stages": [{"step": 5, "seq_len": 0}]}, ["stages", "seq_len"]),
    ("stage_weights_zero", {"stages": [{"step": 5, "weights": {"math": 0, "prose": 0}}]}, ["data.stages[0].weights"]),
    ("stage_weight_negative", {"stages": [{"step": 5, "weights": {"math": -1}}]}, ["data.stages[0].weights"]),
    ("stage_unknown_source", {"stages": [{"step": 5, "weights": {"code": 1}}]}, ["data.stages[0].weights", "code"]),
    ("stage_extra_key", {"stages": [{"step": 5, "lr": 1}]}, ["lr"]),
    ("stages_not_a_list", {"stages": "later"}, ["stages"]),
    ("no_sources", {"sources": {}, "weights": {}}, ["data.sources"]),
    ("source_neither", {"sources": {"math": {}, "prose": {"files": ["corpus:prose.txt"]}}}, ["files", "dataset"]),
    ("source_both", {"sources": {"math": {"files": ["a.txt"], "dataset": "d"}, "prose": {"files": ["b.txt"]}}},
     ["files", "dataset"]),
    ("source_split_on_files", {"sources": {"math": {"files": ["a.txt"], "split": "train"},
                                           "prose": {"files": ["b.txt"]}}}, ["split"]),
    ("text_field_empty", {"sources": {"math": {"files": ["a.jsonl"], "text_field": []},
                                      "prose": {"files": ["b.txt"]}}}, ["text_field"]),
    ("sample_by", {"sources": {"math": {"files": ["a.txt"], "sample_by": "sentence"},
                               "prose": {"files": ["b.txt"]}}}, ["sample_by"]),
    ("eval_fraction_one", {"eval_fraction": 1.0}, ["eval_fraction"]),
    ("eval_fraction_negative", {"eval_fraction": -0.1}, ["eval_fraction"]),
    ("documents", {"documents": "mixed"}, ["documents"]),
]


@pytest.mark.parametrize("case,change,named", MIXTURE_CASES, ids=[c for c, _, _ in MIXTURE_CASES])
def test_a_bad_mixture_section_is_refused_naming_the_field(tmp_path, case, change, named):
    with pytest.raises(ConfigError) as err:
        config_from_dict(_problems_config(tmp_path, _mixture(**change)))
    for word in named:
        assert word in str(err.value), str(err.value)


def _mixture_source_case(tmp_path: Path, case: str) -> tuple[dict, list[str]]:
    """(the source 'mine' of a mixture, words of its refusal) for a source whose content is bad."""
    def write(name, content):
        path = tmp_path / name
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        return str(path)

    if case == "not_a_dataset":
        (tmp_path / "folder").mkdir()
        (tmp_path / "folder" / "notes.txt").write_text("hello")
        return {"dataset": str(tmp_path / "folder")}, ["data.sources.mine", "folder", "save_to_disk"]
    if case == "dataset_is_a_file":
        return {"dataset": write("d.txt", "hello")}, ["data.sources.mine", "d.txt"]
    if case == "dataset_missing":
        return {"dataset": str(tmp_path / "gone")}, ["data.sources.mine", "gone"]
    if case == "dataset_bad_split":
        import datasets

        datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a b c"]})}).save_to_disk(tmp_path / "dd")
        return {"dataset": str(tmp_path / "dd"), "split": "valid"}, ["data.sources.mine", "valid", "train"]
    return {
        "empty": ({"files": [write("e.txt", "")]}, ["data.sources.mine", "e.txt", "empty"]),
        "binary": ({"files": [write("b.txt", b"\x00\xff\x00" * 50)]}, ["data.sources.mine", "b.txt"]),
        "latin1": ({"files": [str(_latin(tmp_path))]}, ["data.sources.mine", "latin.txt", "UTF-8"]),
        "missing": ({"files": [str(tmp_path / "nope.txt")]}, ["data.sources.mine", "nope.txt"]),
        "corpus_unknown": ({"files": ["corpus:nothing.txt"]}, ["corpus:nothing.txt"]),
        "wrong_field": ({"files": [write("r.jsonl", '{"body": "x"}\n')]}, ["data.sources.mine", "text_field"]),
        "number_field": ({"files": [write("n.jsonl", '{"text": "a"}\n{"text": 5}\n')]}, ["data.sources.mine", "text"]),
        "mixed_suffixes": ({"files": [write("a.txt", "x" * 99), write("a.jsonl", '{"text": "y"}\n')]},
                           ["data.sources.mine", "one format"]),
        "too_short": ({"files": [write("s.txt", "hi")]}, ["data.sources.mine", "seq_len"]),
    }[case]


def _latin(tmp_path: Path) -> Path:
    path = tmp_path / "latin.txt"
    path.write_bytes(("caf\u00e9 au lait " * 20).encode("latin-1"))
    return path


MIXTURE_SOURCE_CASES = ["not_a_dataset", "dataset_is_a_file", "dataset_missing", "dataset_bad_split", "empty", "binary",
                        "latin1", "missing", "corpus_unknown", "wrong_field", "number_field", "mixed_suffixes",
                        "too_short"]


@pytest.mark.parametrize("case", MIXTURE_SOURCE_CASES)
def test_train_refuses_a_bad_mixture_source_and_leaves_nothing(tmp_path, case):
    source, named = _mixture_source_case(tmp_path, case)
    data = _mixture(sources={"mine": source, "prose": {"files": ["corpus:prose.txt"], "sample_by": "paragraph"}},
                    weights={"mine": 1, "prose": 1})
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_problems_config(tmp_path, data)))
    _refused(["train", str(config)], *named)
    assert not (tmp_path / "runs" / "p").exists()


def test_a_stage_that_draws_a_source_too_short_for_its_seq_len_is_named(tmp_path):
    (tmp_path / "s.txt").write_text("short text, forty-some bytes in all.\n")
    data = _mixture(sources={"mine": {"files": [str(tmp_path / "s.txt")]},
                             "prose": {"files": ["corpus:prose.txt"], "sample_by": "paragraph"}},
                    weights={"mine": 0, "prose": 1}, seq_len=16, stages=[{"step": 1, "seq_len": 256, "weights": {"mine": 1}}])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_problems_config(tmp_path, data)))
    _refused(["train", str(config), "--set", "train.steps=2"], "data.sources.mine", "seq_len=256", "stage 1")
    assert not (tmp_path / "runs" / "p").exists()


# ============================================================================ recipes
@pytest.mark.parametrize("argv,named", [
    (["train", "recipes/nope"], ["recipes/nope"]),
    (["train", "recipes/nope", "--smoke"], ["recipes/nope"]),
    (["rl", "recipes/nope"], ["recipes/nope"]),
    (["distill", "recipes/nope"], ["recipes/nope"]),
    (["train", "recipes/thesis_150m_pretrain", "--smoke", "--seeds", "2"], ["--smoke", "--seeds"]),
    (["train", "recipes/thesis_150m_pretrain", "--smoke", "--set", "train.steps=0"], ["train.steps"]),
    (["train", "recipes/thesis_150m_pretrain", "--smoke", "--set", "data.seq_len=0"], ["data.seq_len"]),
    (["train", "recipes/thesis_150m_pretrain", "--smoke", "--set", "data.weights={math: 0, prose: 0}"], ["data.weights"]),
    (["train", "recipes/thesis_150m_pretrain", "--smoke", "--set", "data.stages=[{step: 3}, {step: 2}]"],
     ["data.stages[1].step=2"]),
    (["rl", "recipes/nautile_rl_balanced", "--smoke", "--set", "rollout.group_size=0"], ["rollout.group_size"]),
    (["distill", "recipes/thesis_table_3_2_distill", "--smoke", "--set", "stages=[]"], ["stages"]),
    (["train", "recipes/thesis_150m_lr_wd_sweep", "--smoke", "--set", "sweep.axes={}"], ["sweep"]),
], ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None)
def test_recipes_with_bad_names_or_overrides(tmp_path, argv, named, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused([*argv, "--set", f"output_dir={tmp_path / 'runs'}"], *named)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("smoke,named", [
    (None, ["smoke"]), ([1, 2], ["smoke"]), ("tiny", ["smoke"]), ({"train.steps": -1}, ["train.steps"]),
    ({"nonsense.key": 1}, ["nonsense"]),
], ids=["no_section", "list", "text", "bad_value", "unknown_key"])
def test_smoke_sections_that_are_not_right(tmp_path, smoke, named):
    cfg = _problems_config(tmp_path, {"kind": "mqar", "seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32,
                                      "num_train": 8, "num_eval": 4})
    if smoke is not None:
        cfg["smoke"] = smoke
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    _refused(["train", str(tmp_path / "c.yaml"), "--smoke"], *named)
    assert not (tmp_path / "runs").exists()


# ============================================================================ latent attention and Newton
def _latent_cases():
    from assocmem.memories.optimizer import Newton
    from assocmem.mixers.spec import LatentOptions

    return ([("latent", name, v) for _, name, v in field_cases(LatentOptions, "latent")]
            + [("latent", "rope_dim", v) for v in (3, 1, 0)]
            + [("newton", name, v) for _, name, v in field_cases(Newton, "optimizer") if name != "kind"])


LATENT_CASES = _latent_cases()


def _spec_with(where: str, name: str, value) -> dict:
    if where == "latent":
        data = get_preset("mla").model_dump(mode="json")
        data["layer"]["attention"]["latent"][name] = value
    else:
        data = get_preset("gated_deltanet").model_dump(mode="json")
        data["optimizer"] = {"kind": "newton", name: value}
    return data


@pytest.mark.parametrize("where,name,value", LATENT_CASES, ids=[f"{w}.{n}={v!r}" for w, n, v in LATENT_CASES])
def test_bad_latent_attention_and_newton_values_are_refused(where, name, value):
    with pytest.raises(ValidationError) as err:
        MixerSpec.model_validate(_spec_with(where, name, value))
    assert name in str(err.value), str(err.value)


@pytest.mark.parametrize("where,name,value", LATENT_CASES[::3], ids=[f"{w}.{n}={v!r}" for w, n, v in LATENT_CASES[::3]])
def test_derive_names_a_bad_latent_or_newton_field(tmp_path, where, name, value):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec_with(where, name, value)))
    _refused(["derive", str(path)], str(path), name)


@pytest.mark.parametrize("key,value", [
    ("layer.attention.latent.kv_rank", "0"), ("layer.attention.latent.kv_rank", "-4"),
    ("layer.attention.latent.q_rank", "0"), ("layer.attention.latent.rope_dim", "7"),
    ("layer.attention.latent.rope_dim", "0"), ("layer.attention.latent.absorb", "sometimes"),
    ("layer.attention.kind", "sparse"), ("layer.attention.num_kv_heads", "2"),
    ("optimizer", "{kind: newton, damping: -1}"), ("optimizer", "{kind: newton, cg_steps: 0}"),
    ("optimizer", "{kind: newton, lr: .nan}"), ("optimizer", "{kind: newton, steps: 0}"),
    ("optimizer", "{kind: newton, damping: lots}"),
])
def test_train_set_on_an_mla_or_newton_layer_names_the_field(tmp_path, key, value):
    layer = get_preset("mla" if key.startswith("layer") else "deltanet").model_dump(mode="json")
    layer["layer"].update(num_heads=2, head_dim=8, value_dim=8) if "value_dim" in layer["layer"] else \
        layer["layer"].update(num_heads=2, head_dim=8)
    cfg = _problems_config(tmp_path, {"kind": "mqar", "seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32,
                                      "num_train": 8, "num_eval": 4})
    cfg["model"] = {"hybrid": {"d_model": 16, "layers": [layer], "num_heads": 2, "mlp_ratio": 0}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    _refused(["train", str(tmp_path / "c.yaml"), "--set", f"model.hybrid.layers[0].{key}={value}"],
             key.split(".")[-1] if key != "optimizer" else value.split()[-2].rstrip(":"))
    assert not (tmp_path / "runs").exists()


# ============================================================================ tokenizer folders
def _tokenizer_case(tmp_path: Path, case: str) -> tuple[str, list[str], Path | None]:
    """(--tokenizer value, words of its refusal, a marker that custom code would write) per bad tokenizer."""
    if case == "remote_code":
        folder, marker = _remote_code_judge(tmp_path)
        return str(folder), [str(folder)], marker
    if case == "empty_folder":
        (tmp_path / "tok").mkdir()
        return str(tmp_path / "tok"), ["tok"], None
    if case == "a_file":
        (tmp_path / "tok.json").write_text("{}")
        return str(tmp_path / "tok.json"), ["tok.json"], None
    if case == "broken_json":
        (tmp_path / "tok").mkdir()
        (tmp_path / "tok" / "tokenizer_config.json").write_text("{not json")
        return str(tmp_path / "tok"), ["tok"], None
    return str(tmp_path / "nowhere"), ["nowhere"], None


TOKENIZER_CASES = ["remote_code", "empty_folder", "a_file", "broken_json", "missing"]


@pytest.mark.parametrize("case", TOKENIZER_CASES)
def test_probe_tts_refuses_a_bad_tokenizer_folder(work, tmp_path, case):
    tokenizer, named, marker = _tokenizer_case(tmp_path, case)
    _refused(_tts(work, tmp_path, "--tokenizer", tokenizer), *named)
    assert marker is None or not marker.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", TOKENIZER_CASES)
def test_train_refuses_a_bad_tokenizer_in_a_problems_or_mixture_section(work, tmp_path, case):
    tokenizer, named, marker = _tokenizer_case(tmp_path, case)
    for data in ({"kind": "problems", "path": str(work / "gsm.jsonl"), "tokenizer": tokenizer},
                 _mixture(tokenizer=tokenizer)):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(_problems_config(tmp_path, data)))
        _refused(["train", str(tmp_path / "c.yaml")], *named)
        assert not (tmp_path / "runs" / "p").exists()
    assert marker is None or not marker.exists()


def test_eval_problems_reads_the_file_as_the_run_read_its_own(tmp_path):
    """Before: eval --problems took the default fields and prompt format, not the ones the run was trained with
    (a run trained on 'Q: {prompt}' was evaluated on bare prompts)."""
    from assocmem.training.evaluate import problems_section

    trained = ProblemsFile(path="train.jsonl", num_eval=3, num_train=10, prompt_field="problem", answer_field="solution",
                           extractor="boxed", prompt_template="Q: {prompt}\nA:", chat_template="off",
                           system_prompt="Be brief.", max_new_tokens=9, tokenizer="bytes")
    section = problems_section(tmp_path / "test.jsonl", trained)
    assert section == {**trained.model_dump(mode="json", exclude={"num_train", "num_eval"}), "kind": "problems",
                       "path": str(tmp_path / "test.jsonl"), "eval_path": str(tmp_path / "test.jsonl")}
    assert problems_section("t.jsonl", config_from_dict(_problems_config(tmp_path, _mixture())).data) == {
        "kind": "problems", "tokenizer": "bytes", "path": "t.jsonl", "eval_path": "t.jsonl"}


def _newton_presets() -> list[str]:
    from assocmem.mixers import list_presets

    out = []
    for name in list_presets():
        data = get_preset(name).model_dump(mode="json")
        data["optimizer"] = {"kind": "newton", "damping": 0.1}
        try:
            MixerSpec.model_validate(data)
        except ValidationError:
            continue  # the spec names why (closed-form biases, entry gates, ℓ1 retention, the normaliser)
        out.append(name)
    return out


@pytest.mark.parametrize("name", _newton_presets())
def test_every_preset_that_takes_newton_runs_as_a_layer(name):
    """Before: the scan form torch.compile'd Newton's Hessian-vector products under vmap and failed with a raw
    TorchRuntimeError from Dynamo on every preset."""
    import torch

    from assocmem.mixers.layer import build_mixer

    data = get_preset(name).model_dump(mode="json")
    data["optimizer"] = {"kind": "newton", "damping": 0.1}
    torch.manual_seed(0)
    layer = build_mixer(MixerSpec.model_validate(data), 16)
    x = torch.randn(1, 3, 16, requires_grad=True)
    y, _ = layer(x)
    y.sum().backward()
    assert y.shape == (1, 3, 16) and bool(torch.isfinite(y).all()) and bool(torch.isfinite(x.grad).all())


@pytest.mark.parametrize("case", ["raises_on_system", "syntax_error", "undefined_filter"])
def test_a_chat_template_that_fails_is_named(work, tmp_path, case):
    """A tokenizer folder whose chat template refuses a system turn (as Gemma's does) or does not parse."""
    from assocmem.training.text_files import byte_tokenizer_fast

    tok = byte_tokenizer_fast()
    tok.chat_template = {
        "raises_on_system": "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
                            "supported') }}{% endif %}{{ m['content'] }}{% endfor %}",
        "syntax_error": "{% for m in messages %}{{ m['content'] }",
        "undefined_filter": "{% for m in messages %}{{ m['content'] | shout }}{% endfor %}"}[case]
    tok.save_pretrained(tmp_path / "tok")
    _refused(_tts(work, tmp_path, "--tokenizer", str(tmp_path / "tok"), "--system-prompt", "Be brief."),
             "chat template", "--chat-template off" if case != "raises_on_system" else "System role not supported")
    assert not (tmp_path / "out").exists()


def test_a_judge_on_cuda_without_a_gpu_is_named(work, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    spec = f"judge={{kind: model, folder: '{_judge(tmp_path)}', yes: Y, no: N, device: cuda}}"
    _refused(_tts(work, tmp_path, "--verifier", "judge", "--verifier-spec", spec), "device", "cuda")
    assert not (tmp_path / "out").exists()
