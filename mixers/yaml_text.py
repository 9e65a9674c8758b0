"""The one YAML reader of assocmem (specs, model and run configs, ``--set`` values, saved run folders).

``load_yaml(text, source=...)`` is ``yaml.safe_load`` with the limits a config needs (``read_yaml_file(path)``
reads a file with it; a file that is not UTF-8 text is refused naming the file and the byte):

    no tags          a tag (``!!python/object``, ``!include``, ...) is refused; ``!!str`` and the other
                     standard scalar tags are plain YAML and read as usual
    unique keys      a key that appears twice in one mapping is refused (YAML would keep the last silently)
    keys as written  a key spelled like a YAML 1.1 boolean other than true/false (``yes``, ``no``, ``on``,
                     ``off``) is the text it spells: a judge's ``{yes: " Yes", no: " No"}`` names two fields
    bounded depth    at most MAX_DEPTH nested sections (deeper input would exhaust Python's recursion)
    bounded size     at most MAX_NODES values once aliases are expanded (a "billion laughs" tree of
                     nested aliases never finishes expanding downstream); a recursive alias is refused

Every refusal, and every YAML syntax error, is a YAMLInputError (a ValueError) naming ``source``, the line
and column, and what would be right.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 64
MAX_NODES = 100_000
_STANDARD = "tag:yaml.org,2002:"
_MERGE = _STANDARD + "merge"
_BOOL, _STR = _STANDARD + "bool", _STANDARD + "str"
_PLAIN_TAGS = {_STANDARD + t for t in
               ("str", "int", "float", "bool", "null", "map", "seq", "merge", "timestamp", "binary", "set", "omap",
                "pairs")}


class YAMLInputError(ValueError):
    """YAML that is refused (the message names the source, the place and why)."""


def _where(source: str, node_or_mark) -> str:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else source


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing tags, duplicate keys and deep nesting while it composes."""

    def __init__(self, text: str, source: str):
        super().__init__(text)
        self.source, self.depth = source, 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):  # a node composed (and checked) already
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YAMLInputError(f"{_where(self.source, self.peek_event())}: YAML nested deeper than {MAX_DEPTH} "
                                     f"levels; a config has a few levels of sections")
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node.tag not in _PLAIN_TAGS:
            tag = "!!" + node.tag[len(_STANDARD):] if node.tag.startswith(_STANDARD) else node.tag
            raise YAMLInputError(f"{_where(self.source, node)}: YAML tag {tag!r} is not read (tags can build "
                                 f"objects); write a plain value")
        if isinstance(node, MappingNode):
            self._check_keys(node)
        return node

    def _check_keys(self, node: MappingNode) -> None:
        seen: dict[Any, int] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE:
                continue
            if key.tag == _BOOL and key.value.lower() not in ("true", "false"):
                key.tag = _STR  # yes/no/on/off as a key: the word, not a boolean  # a sequence or mapping as a key: the constructor refuses it; << merges a mapping
            name = self.construct_object(key)
            if name in seen:
                raise YAMLInputError(f"{_where(self.source, key)}: key {name!r} appears twice in one mapping (first on "
                                     f"line {seen[name]}); keep one")
            seen[name] = key.start_mark.line + 1


def _expanded_size(node: Node, source: str, sizes: dict[int, int], open_: set[int]) -> int:
    """Number of values ``node`` stands for once every alias is expanded (memoised per node)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        raise YAMLInputError(f"{_where(source, node)}: a YAML alias refers to the section that holds it (recursive); "
                             f"write the values out")
    open_.add(id(node))
    children = [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else (
        node.value if isinstance(node, SequenceNode) else [])
    size = 1
    for child in children:
        size += _expanded_size(child, source, sizes, open_)
        if size > MAX_NODES:
            raise YAMLInputError(f"{_where(source, node)}: the YAML expands to more than {MAX_NODES} values (nested "
                                 f"aliases *name multiply); write the values out or use fewer aliases")
    open_.discard(id(node))
    sizes[id(node)] = size
    return size


def load_yaml(text: str, *, source: str) -> Any:
    """The value of the YAML document ``text`` (None for an empty one); ``source`` (a file path, ``--set
    KEY``) names it in errors. Raises YAMLInputError (see the module docstring)."""
    try:
        loader = _Loader(text, source)  # the reader refuses control characters here
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        raise YAMLInputError(f"{source}, line {line}: character {chr(err.character)!r} is not allowed in YAML text "
                             f"({err.reason}); a YAML file is printable text, not a binary file") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, source, {}, set())
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = " ".join(p for p in (err.context, err.problem) if p)
        raise YAMLInputError(f"{_where(source, mark)}: not valid YAML ({what})") from None
    except yaml.YAMLError as err:
        raise YAMLInputError(f"{source}: not valid YAML ({err})") from None
    except RecursionError:
        raise YAMLInputError(f"{source}: YAML nested too deeply to read; a config has a few levels of sections") \
            from None
    finally:
        loader.dispose()


def read_yaml_file(path: str | Path) -> Any:
    """``load_yaml`` of the file ``path``; a file that is not UTF-8 text or cannot be read raises YAMLInputError
    naming it (a missing file raises FileNotFoundError)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise YAMLInputError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); a YAML file is text") \
            from None
    except IsADirectoryError:
        raise YAMLInputError(f"{path} is a folder, not a YAML file") from None
    return load_yaml(text, source=str(path))
