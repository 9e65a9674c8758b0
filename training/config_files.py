"""Config files, whatever the config: a YAML mapping read with clear errors (``read_yaml``,
``read_mapping``; every YAML text goes through mixers/yaml_text.load_yaml: no tags, no duplicate keys,
bounded depth and alias expansion, errors naming the file and line; ``parse_yaml`` for one value),
``--set key.sub=value`` overrides split and put into the raw mapping (``split_override``, ``put_value``;
``key[i]`` reaches entry i of a list: ``model.hybrid.layers[0].bias.p=3``), a recipe's ``smoke:`` section
(``take_smoke``, applied by ``--smoke``), and ``read_config_mapping``
for the configs that validate the whole mapping themselves (distill, rl). ``config.py`` adds
TrainConfig's typed overrides on top.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from assocmem.mixers.yaml_text import YAMLInputError, load_yaml, read_yaml_file


class ConfigError(ValueError):
    """A config file or override that does not validate (the message says where and why)."""


def parse_yaml(text: str, *, source: str) -> Any:
    """``load_yaml`` (mixers/yaml_text.py) of ``text``; refused YAML raises ConfigError naming ``source``."""
    try:
        return load_yaml(text, source=source)
    except YAMLInputError as err:
        raise ConfigError(str(err)) from None


def read_yaml(path: str | Path) -> Any:
    """The YAML value of a file (``read_yaml_file``); an unreadable or non-UTF-8 file, or refused YAML, raises
    ConfigError naming it."""
    try:
        return read_yaml_file(path)
    except YAMLInputError as err:
        raise ConfigError(str(err)) from None
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None


def read_mapping(path: Path) -> dict:
    """The YAML mapping in the config file ``path`` (a missing file or another YAML value raise ConfigError)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data


SMOKE = "smoke"  # the recipe section that --smoke applies


def take_smoke(data: dict, path: str | Path, smoke: bool) -> dict:
    """Remove the ``smoke:`` section from a config mapping and, with ``smoke``, apply it.

    A recipe's ``smoke:`` maps dotted keys to values (``train.steps: 4``, ``model.preset: thesis-tiny-transformer``,
    ``sweep.axes.lr: {...}``): what ``--smoke`` sets, before any ``--set``, to shrink the model, the steps and the
    data to a run of seconds on a CPU. ``--smoke`` on a config without that section raises ConfigError.
    """
    section = data.pop(SMOKE, None)
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"{path}: {SMOKE}: must map dotted keys to values (e.g. train.steps: 4), got "
                          f"{type(section).__name__}")
    if not smoke:
        return data
    if not section:
        raise ConfigError(f"{path} has no {SMOKE}: section, so --smoke does not know how to shrink it; the recipes "
                          f"in training/configs/recipes/ have one")
    for dotted, value in section.items():
        put_value(data, parse_key(str(dotted)), value, where=f"{path}: {SMOKE}.{dotted}")
    return data


def read_config_mapping(path: str | Path, overrides: list[str] | None = None, *, example: str,
                        smoke: bool = False) -> dict:
    """A YAML mapping from ``path`` with its ``smoke:`` section applied if ``smoke`` (``take_smoke``), then plain
    ``--set key.sub=value`` overrides (values parsed as YAML, missing or null sections created) and ``name``
    defaulting to the file's stem; for the configs that validate the whole mapping themselves (distill, rl).
    ``example`` shows a valid override in the error for one without ``=``."""
    path = Path(path)
    data = take_smoke(read_mapping(path), path, smoke)
    for item in overrides or []:
        dotted, keys, raw = split_override(item, example)
        put_value(data, keys, parse_yaml(raw, source=f"--set {dotted}"), where=f"--set {dotted}")
    data.setdefault("name", path.stem)
    return data


Key = str | int  # a mapping key, or the index of a list entry


def put_value(data: dict, path: list[Key], value: Any, *, where: str) -> None:
    """``data[path[0]]...[path[-1]] = value``, creating absent or null sections (an int in ``path`` is the
    index of an existing list entry); ``where`` names the override in the error for a path through a value,
    an index into something that is not a list or an index out of range."""
    node: Any = data
    for i, part in enumerate(path):
        here = show_key(path[: i + 1])
        if isinstance(part, int):
            if not isinstance(node, list):
                kind = f"the string {node!r}" if isinstance(node, str) else f"a {type(node).__name__}"
                raise ConfigError(f"{where}: {show_key(path[:i])} is {kind}, not a list, so it has no entry [{part}]"
                                  + (" (write the layers as a YAML list to set one of them)"
                                     if isinstance(node, str) else ""))
            if not 0 <= part < len(node):
                raise ConfigError(f"{where}: index [{part}] is out of range: {show_key(path[:i])} has {len(node)} "
                                  f"entries (indices 0..{len(node) - 1})")
        elif not isinstance(node, dict):
            raise ConfigError(f"{where}: {show_key(path[:i])} is {node!r}, not a section, so it has no key {part!r}")
        if i == len(path) - 1:
            node[part] = value
        elif isinstance(part, str) and node.get(part) is None:  # absent or null: a new section
            if isinstance(path[i + 1], int):
                raise ConfigError(f"{where}: {here} is not set, so it has no entry [{path[i + 1]}]")
            node[part] = {}
            node = node[part]
        else:
            node = node[part]


def parse_key(dotted: str) -> list[Key]:
    """``"model.hybrid.layers[0].bias.p"`` -> ["model", "hybrid", "layers", 0, "bias", "p"]; a part that is
    neither ``key`` nor ``key[i]...`` (i ≥ 0) raises ConfigError naming it."""
    path: list[Key] = []
    for part in dotted.strip().split("."):
        if not part:
            continue
        found = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", part)
        if found is None:
            raise ConfigError(f"--set {dotted.strip()}: {part!r} is not a key or key[index] (an index is an integer "
                              f"≥ 0, e.g. layers[0])")
        path += [found.group(1), *(int(i) for i in re.findall(r"\d+", found.group(2)))]
    return path


def show_key(path: list[Key]) -> str:
    """The dotted form of a parsed key (``parse_key``'s inverse)."""
    return "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + p for i, p in enumerate(path))


def split_override(item: str, example: str) -> tuple[str, list[Key], str]:
    """``"a.b[0].c=raw"`` -> ("a.b[0].c", ["a", "b", 0, "c"], "raw"); no ``=``, an empty key or a bad index
    raise ConfigError."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value (e.g. {example}), got {item!r}")
    dotted, raw = item.split("=", 1)
    path = parse_key(dotted)
    if not path:
        raise ConfigError(f"--set has an empty key in {item!r}")
    return dotted.strip(), path, raw


BUNDLED = Path(__file__).resolve().parent / "configs"  # the example configs shipped with the package


def bundled_configs() -> list[str]:
    """Names of the configs shipped in training/configs/ (recipes as recipes/<name>)."""
    return sorted(p.stem for p in BUNDLED.glob("*.yaml")) + sorted(f"recipes/{p.stem}"
                                                                   for p in (BUNDLED / "recipes").glob("*.yaml"))


def resolve_config(name: str) -> str:
    """A YAML path, or the name of a config shipped in training/configs/ (with or without .yaml; recipes as
    recipes/<name>)."""
    if Path(name).is_file():
        return name
    bundled = BUNDLED / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if bundled.is_file():
        return str(bundled)
    raise ConfigError(f"config file not found: {name} (bundled configs: {bundled_configs()})")
