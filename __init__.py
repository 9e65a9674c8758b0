"""assocmem: sequence mixers as specs (memory, attentional bias, retention, optimizer), their derived
and verified fast forms, hybrid HF language models, training and probes.

``import assocmem`` is light: it imports neither torch nor transformers. The model classes load on
first use (``assocmem.AssocMemForCausalLM``, ``from assocmem import HybridConfig``). The models are
registered with transformers' Auto classes (model_type "assocmem") as soon as both packages are
imported, in either order, so a saved folder loads with ``AutoModelForCausalLM.from_pretrained(folder)``
and needs no ``trust_remote_code``. The floors:
``assocmem.memories`` < ``mixers`` < ``models`` < ``training`` < ``probes``; the command line,
``assocmem.cli``, sits above them all.
"""
from __future__ import annotations

import importlib
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("assocmem")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# public name -> the module that defines it, imported on first access (PEP 562)
_LAZY = {name: "assocmem.models" for name in ("AssocMemConfig", "AssocMemForCausalLM", "AssocMemModel", "HybridConfig")}
# importing this module registers model_type "assocmem" with AutoConfig / AutoModel / AutoModelForCausalLM
_REGISTERING_MODULE = "assocmem.models.modeling"

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'assocmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def _register_auto_classes() -> None:
    """Register the models with transformers' Auto classes (imports torch and the model code). When
    ``assocmem.models`` is already imported, or is being imported (its modules import transformers),
    the registering module runs as part of it."""
    if "assocmem.models" not in sys.modules:
        importlib.import_module(_REGISTERING_MODULE)


class _Loader:
    """``loader`` (the real one of ``transformers``) that calls ``then()`` right after the module has run.
    Every other attribute (resources, source, ``is_package``) is the real loader's."""

    def __init__(self, loader, then) -> None:
        self._loader, self._then = loader, then

    def __getattr__(self, name: str):
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._then()


class _AfterImport(MetaPathFinder):
    """A post-import hook for one top-level module: when ``name`` is imported, ``then()`` runs right
    after the module's own code (so ``from name import X`` works inside it); the hook then leaves
    ``sys.meta_path``. A mere look-up (``importlib.util.find_spec(name)``, as packages probe what is
    installed) executes nothing and keeps the hook."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then, self._searching = name, then, False

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname != self.name or self._searching:
            return None
        self._searching = True  # the finders asked below may ask this one again
        try:
            spec = next((s for f in sys.meta_path if f is not self and hasattr(f, "find_spec")
                         and (s := f.find_spec(fullname, path, target)) is not None), None)
        finally:
            self._searching = False
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self._done)
        return spec  # None (not installed): the import fails as it would without the hook

    def _done(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.then()


def _register_when_transformers_loads() -> None:
    if "transformers" in sys.modules:
        _register_auto_classes()
    elif not any(type(f).__name__ == "_AfterImport" and getattr(f, "name", None) == "transformers"
                 for f in sys.meta_path):  # (a second copy of this module, as a test runner may load, adds none)
        sys.meta_path.insert(0, _AfterImport("transformers", _register_auto_classes))


_register_when_transformers_loads()
