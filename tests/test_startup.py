"""``import assocmem`` is light, and the Auto classes still know model_type "assocmem" whenever a saved
folder is loaded: after ``import assocmem``, transformers imported later or earlier. Each case runs in a
fresh interpreter (what is imported depends on what ran before)."""
import json
import subprocess
import sys

import pytest


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory):
    """A tiny assocmem model saved with save_pretrained (config.json says model_type "assocmem")."""
    from assocmem.models import build_model

    folder = tmp_path_factory.mktemp("tiny") / "model"
    build_model({"d_model": 16, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0, "vocab_size": 64}).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "assocmem"
    return folder


def test_import_assocmem_imports_neither_transformers_nor_torch():
    loaded = _run("import sys, assocmem; print(sorted({'transformers', 'torch'} & set(sys.modules)))")
    assert loaded == "[]"


LOAD = ("from transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained({folder!r})\n"
        "print(type(model).__module__, type(model).__name__, model.config.model_type)")


@pytest.mark.parametrize("before", ["import assocmem", "import transformers; import assocmem",
                                    "import assocmem; import importlib.util; importlib.util.find_spec('transformers')"],
                         ids=["assocmem-first", "transformers-first", "after-a-lookup"])
def test_from_pretrained_finds_the_registered_classes(before, saved_folder):
    """No trust_remote_code: the registration ran when transformers was imported after assocmem (a
    post-import hook; a mere find_spec look-up does not spend it), or at once when it already was."""
    out = _run(f"{before}\n" + LOAD.format(folder=str(saved_folder)))
    assert out == "assocmem.models.modeling AssocMemForCausalLM assocmem"


def test_model_classes_load_on_first_access(saved_folder):
    out = _run("import sys\nfrom assocmem import AssocMemForCausalLM, HybridConfig\n"
               "import assocmem\n"
               f"model = AssocMemForCausalLM.from_pretrained({str(saved_folder)!r})\n"
               "print(assocmem.AssocMemConfig.model_type, HybridConfig.__name__, type(model).__name__)")
    assert out == "assocmem HybridConfig AssocMemForCausalLM"


def test_an_unknown_attribute_is_an_attribute_error():
    out = _run("import assocmem\ntry:\n    assocmem.NoSuchThing\nexcept AttributeError as err:\n    print(err)")
    assert out == "module 'assocmem' has no attribute 'NoSuchThing'"


@pytest.mark.parametrize("argv", [["--help"], ["derive", "--help"], ["verify", "--help"], ["train", "--help"],
                                  ["bench", "breakdown", "--help"]], ids=" ".join)
def test_help_imports_neither_torch_nor_transformers(argv):
    """The parsers (cli/) import argparse and stdlib only; the library is imported by a command's handler."""
    out = _run("import sys\nfrom assocmem.cli import main\n"
               f"try:\n    main({argv!r})\nexcept SystemExit as stop:\n    assert stop.code == 0, stop.code\n"
               "print(sorted({'transformers', 'torch'} & set(sys.modules)))")
    assert out.endswith("\n[]") and "usage: assocmem" in out


def test_without_import_assocmem_transformers_does_not_know_the_model(saved_folder):
    """docs/sharing.md: no auto_map and no remote code by design, so a receiver who has not imported assocmem
    gets transformers' unknown-model-type error; config.json names nothing to execute."""
    config = json.loads((saved_folder / "config.json").read_text())
    assert "auto_map" not in config and not list(saved_folder.glob("*.py"))
    code = ("from transformers import AutoModelForCausalLM\n"
            f"try:\n    AutoModelForCausalLM.from_pretrained({str(saved_folder)!r})\n"
            "except (ValueError, KeyError) as err:\n    print('refused:', err)")
    out = _run(code)
    assert out.startswith("refused:") and "assocmem" in out
