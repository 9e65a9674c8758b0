"""No code from a model folder or a Hub id ever runs (models/hf_load.py).

1. Read from the source with ast: every transformers load call of the project (``from_pretrained``,
   ``from_config``, ``pipeline``) passes ``trust_remote_code=False``.
2. A folder whose config.json names custom code (``auto_map``) is refused on every path that loads a
   model, config or tokenizer, with a message naming the folder; its Python file never runs and nothing
   is asked on the terminal (``assocmem distill`` answered "y" on stdin still refuses).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LOADERS = {"from_pretrained", "from_config", "pipeline"}
REFUSED = "asks to run its own code"


def _load_calls() -> list[tuple[str, int, bool]]:
    """(file, line, passes trust_remote_code=False) of every load call in the package source."""
    calls = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", ".venv") or rel.parts[0].startswith("."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in LOADERS:
                safe = any(k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                           for k in node.keywords)
                calls.append((str(rel), node.lineno, safe))
    return calls


def test_every_load_call_passes_trust_remote_code_false():
    calls = _load_calls()
    assert len(calls) >= 4, calls  # the helpers of models/hf_load.py at least: the scan sees them
    unsafe = [f"{file}:{line}" for file, line, safe in calls if not safe]
    assert not unsafe, f"load calls without trust_remote_code=False: {unsafe}"


@pytest.fixture
def evil(tmp_path):
    """A folder whose config.json and tokenizer_config.json point at modeling_evil.py, which would write
    ran.txt when imported."""
    folder = tmp_path / "evil"
    folder.mkdir()
    marker = tmp_path / "ran.txt"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    auto_map = {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
                "AutoTokenizer": ["modeling_evil.EvilTokenizer", None]}
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                    "num_hidden_layers": 2, "auto_map": auto_map}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": auto_map}))
    yield folder
    assert not marker.exists()


def test_every_loader_refuses_a_folder_with_custom_code(evil):
    from assocmem.models.convert import from_hf_causal_lm
    from assocmem.models.hf_load import load_causal_lm, load_hf_config, load_hf_tokenizer
    from assocmem.probes.io import load_model
    from assocmem.probes.lm_eval_cli import harness_argv
    from assocmem.training.model_factory import load_pretrained
    from assocmem.training.text_files import load_tokenizer

    for load in (load_hf_config, load_causal_lm, load_hf_tokenizer, load_pretrained, lambda f: load_model(str(f)),
                 load_tokenizer, lambda f: from_hf_causal_lm(f, replace=[0]), lambda f: harness_argv(str(f), [])):
        with pytest.raises(ValueError, match=f"the model folder {evil} {REFUSED} .config.json sets auto_map"):
            load(evil)
    (evil / "config.json").unlink()
    with pytest.raises(ValueError, match=f"{REFUSED} .tokenizer_config.json sets auto_map"):
        load_tokenizer(str(evil))


def test_eval_harness_sets_trust_remote_code_false_and_refuses_it_in_model_args(tmp_path):
    from assocmem.probes.lm_eval_cli import harness_argv

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "tokenizer.json").write_text("{}")  # a model without a tokenizer is refused before this point
    assert "trust_remote_code=False" in harness_argv(str(tmp_path), [])[4].split(",")
    with pytest.raises(ValueError, match=r"\['trust_remote_code'\] are set by eval-harness"):
        harness_argv(str(tmp_path), ["--model_args", "trust_remote_code=True"])


def test_a_model_config_naming_custom_code_is_refused():
    from assocmem.training.config import ModelConfig
    from assocmem.training.model_factory import build_from_config

    model = ModelConfig(hf_config={"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
                                   "num_hidden_layers": 1, "num_attention_heads": 2,
                                   "auto_map": {"AutoModelForCausalLM": "evil/repo--modeling.Evil"}})
    with pytest.raises(ValueError, match="auto_map=.* names custom code; assocmem never runs it"):
        build_from_config(model, vocab_size=32)


def test_distill_with_a_teacher_that_carries_code_is_refused_without_a_prompt(evil, tmp_path):
    """The command as a user runs it, "y" waiting on stdin: exit 2 naming the teacher folder, no question."""
    config = tmp_path / "d.yaml"
    config.write_text(yaml.safe_dump({
        "name": "d", "output_dir": str(tmp_path / "runs"), "teacher": str(evil),
        "student": {"mixer": "gdn", "replace": [1]},
        "data": {"kind": "mqar", "seq_len": 24, "num_kv_pairs": 3, "vocab_size": 64, "num_train": 8, "num_eval": 8},
        "stage3": {"train": {"steps": 1, "batch_size": 4}}}))
    done = subprocess.run([sys.executable, "-m", "assocmem.cli", "distill", str(config)], input="y\ny\n",
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    assert f"teacher: the model folder {evil} {REFUSED}" in done.stderr
    assert "custom code?" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()
