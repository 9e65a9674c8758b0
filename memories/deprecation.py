"""Old import paths of public names that moved, kept for one release with a DeprecationWarning.

A module that moved leaves a shim at its old path:

    # mixers/verify_cli.py (the old path)
    from assocmem.memories.deprecation import moved, names_in
    __getattr__ = moved(__name__, {"main": "assocmem.mixers.cli.verify_main",
                                   **names_in("assocmem.mixers.cli", "print_table")})

Reading one of the listed names from the old module warns (DeprecationWarning, naming the new
path) and returns the object of the new module, imported at that moment: a shim imports nothing
until it is used, so an old path on a lower floor (say ``assocmem.mixers.bench``) does not make
its floor import a higher one (``assocmem.training``). Names not listed raise AttributeError.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Callable, Mapping

REMOVED_IN = "0.2.0"  # the release that drops every shim


def names_in(module: str, *names: str) -> dict[str, str]:
    """{name: "module.name"} for names that kept their name as they moved to ``module``."""
    return {n: f"{module}.{n}" for n in names}


def moved(old: str, targets: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for module ``old``: each name of ``targets`` forwards, with a
    DeprecationWarning, to its new dotted path ("assocmem.mixers.cli.verify_main")."""
    targets = dict(targets)

    def __getattr__(name: str) -> object:
        if name not in targets:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module, attr = targets[name].rsplit(".", 1)
        warnings.warn(f"{old}.{name} moved to {targets[name]}; the old path is removed in assocmem {REMOVED_IN}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), attr)

    __getattr__.targets = targets  # what the shim forwards (tests/test_deprecations.py resolves every one)
    return __getattr__
