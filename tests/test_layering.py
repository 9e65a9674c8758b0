"""The floors memories < mixers < models < training < probes < cli, read from the source with ast.

1. No module imports a module of a higher floor (imports inside functions count). The command line
   (``cli/``) is the top floor: it may import every floor and none imports it, except the lab's
   experiment modules, whose parsers the annex's frame builds (``LAB_PARSERS``: their argparse types).
2. The import graph between modules has no cycle.
3. No ``from x import _private`` across files.
4. A higher floor is named by string (``importlib``) only where that is the point: a command rerun
   in a fresh process (``python -m assocmem.cli``).
5. The experiments (``probes/experiments/``) are a one-way annex: no floor imports or names it; only
   the command line does, in its two commands of the annex (``ANNEX_COMMANDS``).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("memories", "mixers", "models", "training", "probes", "cli")
MODULE_NAME = re.compile(r"assocmem\.(?:%s)(?:\.\w+)*" % "|".join(FLOORS))
DISPATCHER = "assocmem.cli"
# the experiments whose parsers use cli/types.py (the frame builds their parsers in the annex)
LAB_PARSERS = {f"assocmem.probes.experiments.{name}"
               for name in ("frame", "grokking", "hybrid", "leak", "rl", "text_demo", "wiola")}
# modules that rerun an assocmem command in a fresh process, naming the command line by string
RERUNS_A_COMMAND = {"assocmem.probes.experiments.reproduce"}
ANNEX = "assocmem.probes.experiments"
ANNEX_COMMANDS = {f"{DISPATCHER}.experiment", f"{DISPATCHER}.reproduce"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["assocmem", *parts])


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for floor in FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            out[_module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return out


MODULES = _modules()


def _floor(module: str) -> int:
    return FLOORS.index(module.split(".")[1])


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def _imports(module: str) -> list[tuple[str, list[str]]]:
    """(target module, imported names) of every assocmem import in ``module``; ``from pkg import sub``
    of a submodule counts as an import of the submodule."""
    path, tree = MODULES[module]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("assocmem.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(module, path).split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("assocmem."):
                continue
            names = [a.name for a in node.names]
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            out += [(s, []) for s in subs] + [(target, [n for n in names if f"{target}.{n}" not in MODULES])]
    return out


def _named_modules(tree: ast.Module) -> set[str]:
    """Module names held in string constants, docstrings excepted."""
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings and MODULE_NAME.fullmatch(n.value)}


def test_the_tree_is_read():
    assert {"assocmem.memories.derive", "assocmem.mixers.lower", "assocmem.models.blocks", DISPATCHER,
            "assocmem.cli.probe", "assocmem.cli.types"} <= set(MODULES)


def test_no_import_from_a_lower_floor_to_a_higher_one():
    back = sorted((m, t) for m in MODULES for t, _ in _imports(m) if _floor(t) > _floor(m)
                  and not (m in LAB_PARSERS and t == "assocmem.cli.types"))
    assert back == []


def test_nothing_imports_the_command_line():
    """cli/ is the top floor; below it only the lab's parser modules import (its argparse types)."""
    importers = {m for m in MODULES if _floor(m) < _floor(DISPATCHER)
                 for t, _ in _imports(m) if t.startswith(DISPATCHER)}
    assert importers <= LAB_PARSERS


def test_the_import_graph_has_no_cycle():
    graph = {m: {t for t, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}
    cycles, index, low, stack, on_stack = [], {}, {}, [], set()

    def strongconnect(v):  # Tarjan: every strongly connected component of more than one module is a cycle
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert cycles == []


def test_no_private_name_is_imported_across_files():
    private = sorted(f"{m} imports {t}.{n}" for m in MODULES for t, names in _imports(m) for n in names
                     if n.startswith("_") and not n.startswith("__"))
    assert private == []


def test_a_higher_floor_is_named_by_string_only_to_rerun_a_command():
    named = {m: {t for t in _named_modules(tree) if _floor(t) > _floor(m)} for m, (_, tree) in MODULES.items()}
    named = {m: ts for m, ts in named.items() if ts}
    assert set(named) == RERUNS_A_COMMAND
    assert all(named[m] == {DISPATCHER} for m in RERUNS_A_COMMAND)


def _in_annex(module: str) -> bool:
    return module == ANNEX or module.startswith(ANNEX + ".")


def test_the_annex_is_read():
    assert {f"{ANNEX}.frame", f"{ANNEX}.registry", f"{ANNEX}.reproduce"} <= set(MODULES)


def test_nothing_outside_the_experiments_imports_them_but_their_commands():
    inward = sorted((m, t) for m in MODULES if not _in_annex(m) for t, _ in _imports(m) if _in_annex(t))
    assert {m for m, _ in inward} <= ANNEX_COMMANDS


def test_only_the_commands_of_the_annex_name_the_experiments():
    named = {m: {t for t in _named_modules(tree) if _in_annex(t)} for m, (_, tree) in MODULES.items()
             if not _in_annex(m)}
    assert set(m for m, ts in named.items() if ts) <= ANNEX_COMMANDS
