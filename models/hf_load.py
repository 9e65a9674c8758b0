"""Every transformers load of this project: no code from a model folder or a Hub id ever runs.

    load_hf_config(folder)         AutoConfig.from_pretrained
    load_causal_lm(folder, **kw)   AutoModelForCausalLM.from_pretrained
    load_hf_tokenizer(folder)      AutoTokenizer.from_pretrained
    causal_lm_from_config(config)  AutoModelForCausalLM.from_config

A pickled ``pytorch_model.bin`` is read with ``weights_only`` (transformers' default); one holding more than
tensors is an UnsafePickleError naming the files. Each passes ``trust_remote_code=False`` (tests/test_fuzz.py scans the source for load calls without it)
and first refuses a folder whose config files name custom code (``auto_map`` / ``custom_pipelines``):
transformers would otherwise ask "Do you wish to run the custom code?" and run it on "y".
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

# the files a load reads, and the keys by which they point at Python code of the folder
CODE_KEYS = ("auto_map", "custom_pipelines")
CONFIG_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")


class CustomCodeError(ValueError):
    """A model folder that asks to run its own code (the message names the folder and the file)."""


class UnsafePickleError(ValueError):
    """Pickled weights that ``torch.load(weights_only=True)`` refuses (the message names the files)."""


def _pickled_files(folder: str | Path) -> str:
    found = sorted(p.name for p in Path(folder).glob("*.bin")) if Path(folder).is_dir() else []
    return ", ".join(found) or "pickled weight files"


def refuse_custom_code(folder: str | Path) -> None:
    """Raise CustomCodeError when a config file of ``folder`` names custom code; a folder that is not
    there (a Hub id) is left to transformers, which refuses custom code with ``trust_remote_code=False``."""
    folder = Path(folder)
    for name in CONFIG_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is not readable JSON ({type(err).__name__}: {err})") from None
        keys = [k for k in CODE_KEYS if data.get(k)] if isinstance(data, dict) else []
        if keys:
            raise CustomCodeError(f"the model folder {folder} asks to run its own code ({path.name} sets "
                                  f"{', '.join(keys)}); assocmem never runs code from a model folder or a Hub id "
                                  f"(trust_remote_code=False): give a folder of a model class transformers or "
                                  f"assocmem ships")


def load_hf_config(folder: str | Path, **kwargs):
    """``AutoConfig.from_pretrained(folder)`` without running code from it."""
    from transformers import AutoConfig

    refuse_custom_code(folder)
    return AutoConfig.from_pretrained(folder, trust_remote_code=False, **kwargs)


def load_causal_lm(folder: str | Path, **kwargs):
    """``AutoModelForCausalLM.from_pretrained(folder)`` without running code from it."""
    from . import modeling  # noqa: F401  (registers model_type "assocmem" with transformers)
    from transformers import AutoModelForCausalLM

    refuse_custom_code(folder)
    try:
        return AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=False, **kwargs)
    except pickle.UnpicklingError:  # torch.load(weights_only=True) of a pytorch_model.bin
        raise UnsafePickleError(f"the weights in {folder} ({_pickled_files(folder)}) hold pickled Python objects beyond "
                                f"tensors, which could run code when loaded, so they are refused (weights_only): "
                                f"convert them to model.safetensors where you trust them") from None


def load_hf_tokenizer(folder: str | Path, **kwargs):
    """``AutoTokenizer.from_pretrained(folder)`` without running code from it."""
    from transformers import AutoTokenizer

    refuse_custom_code(folder)
    return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, **kwargs)


def causal_lm_from_config(config):
    """``AutoModelForCausalLM.from_config(config)`` (randomly initialised) without running code a config's
    ``auto_map`` names."""
    from transformers import AutoModelForCausalLM

    if getattr(config, "auto_map", None):
        raise CustomCodeError(f"the model config sets auto_map={config.auto_map!r}, which names custom code; "
                              f"assocmem never runs it (trust_remote_code=False): leave auto_map out")
    return AutoModelForCausalLM.from_config(config, trust_remote_code=False)
