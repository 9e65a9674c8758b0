"""One YAML reader (mixers/yaml_text.py) for every config file and --set value: a "billion laughs" tree, deep
nesting, duplicate keys, tags and syntax errors are refused at once with the file (or --set key), line and
why; the commands exit 2 with that message, no traceback, nothing written."""
from __future__ import annotations

import pytest

from assocmem.cli import main
from assocmem.mixers import MixerSpec
from assocmem.mixers.yaml_text import MAX_DEPTH, MAX_NODES, YAMLInputError, load_yaml
from assocmem.models import HybridConfig
from assocmem.training.config import load_config

LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'lol'] * 9)}]\n" for i in range(9))


def test_plain_yaml_reads_as_safe_load_does():
    text = "a: 1\nb: [1.5, x, null, true]\nbase: &b {x: 1}\nuse: {<<: *b, y: 2}\ns: !!str 12\n"
    assert load_yaml(text, source="f") == {"a": 1, "b": [1.5, "x", None, True], "base": {"x": 1},
                                           "use": {"x": 1, "y": 2}, "s": "12"}
    assert load_yaml("", source="f") is None


@pytest.mark.parametrize("text, message", [
    (LAUGHS, rf"f.yaml, line 6, column 5: the YAML expands to more than {MAX_NODES} values \(nested aliases"),
    ("a: " + "[" * 5000 + "]" * 5000, rf"f.yaml, line 1, column {MAX_DEPTH + 3}: YAML nested deeper than {MAX_DEPTH}"),
    ("a: &a [1, *a]\n", "f.yaml, line 1, column 4: a YAML alias refers to the section that holds it"),
    ("a: 1\nb: 2\na: 3\n", r"f.yaml, line 3, column 1: key 'a' appears twice in one mapping \(first on line 1\)"),
    ("x: !!python/object/apply:os.system ['true']\n", r"line 1, column 4: YAML tag '!!python/object/apply:os.system'"),
    ("x: !include other.yaml\n", "YAML tag '!include' is not read"),
    ("a: [1, 2\n", r"f.yaml, line 2, column 1: not valid YAML \(while parsing a flow sequence expected ','"),
])
def test_refused_yaml_names_the_place(text, message):
    with pytest.raises(YAMLInputError, match=message):
        load_yaml(text, source="f.yaml")


def _model_section(extra: str) -> str:
    return ("model:\n  hf_config:\n    model_type: llama\n" + "".join(f"    {line}\n" for line in extra.splitlines())
            + "data: {kind: mqar, seq_len: 16, num_kv_pairs: 2, vocab_size: 32}\ntrain: {steps: 1}\n")


@pytest.mark.parametrize("extra, message", [
    (LAUGHS, "expands to more than"),
    ("deep: " + "[" * 400 + "]" * 400, "nested deeper than"),
    ("hidden_size: 16\nhidden_size: 32", "key 'hidden_size' appears twice"),
    ("hidden_size: !!python/name:os.system", "YAML tag '!!python/name:os.system'"),
])
@pytest.mark.parametrize("command", [["train"], ["train", "--print-config"], ["rl", "--print-config"],
                                     ["distill", "--print-config"]])
def test_every_command_refuses_such_a_config_file_with_exit_2(tmp_path, capsys, extra, message, command):
    path = tmp_path / "c.yaml"
    path.write_text(_model_section(extra))
    assert main([command[0], str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert f"{path}, line " in err and message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value, message", [
    ("[1, 2", "--set optim.betas, line 1, column 6: not valid YAML (while parsing a flow sequence"),
    ("{a: 1, a: 2}", "--set optim.betas, line 1, column 8: key 'a' appears twice"),
    ("!!python/object:x", "--set optim.betas, line 1, column 1: YAML tag '!!python/object:x'"),
])
@pytest.mark.parametrize("command", ["train", "rl", "distill"])
def test_a_bad_set_value_names_the_key(write_config, capsys, value, message, command):
    path = write_config("c")
    assert main([command, str(path), "--set", f"optim.betas={value}", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_config_that_is_not_utf8_text_names_the_file(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"name: \xff\xfe\x00binary")
    assert main(["train", str(path)]) == 2
    assert f"{path} is not UTF-8 text (byte 6: invalid start byte)" in capsys.readouterr().err
    with pytest.raises(YAMLInputError, match=f"{path} is not UTF-8 text"):
        MixerSpec.from_yaml(path)
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        load_config(path)


def test_specs_and_model_configs_use_the_same_reader(tmp_path):
    with pytest.raises(YAMLInputError, match="the MixerSpec YAML, line 2, column 1: key 'name' appears twice"):
        MixerSpec.from_yaml("name: a\nname: b\n")
    path = tmp_path / "h.yaml"
    path.write_text(LAUGHS)
    with pytest.raises(YAMLInputError, match=f"{path}, line 6.*expands to more than"):
        HybridConfig.from_yaml(path)
