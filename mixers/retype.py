"""Run someone else's float32-internal code in float64, unchanged otherwise.

Reference implementations written by others (transformers' modeling files, FLA's
naive files) often compute in float32 whatever the input dtype: ``x.float()``,
``x.to(torch.float32)``, ``dtype=torch.float``. Compared with a float64 oracle they
then agree only to float32 rounding (~1e-6), which hides errors below that level.

``float64_retyped(module, ...)`` is a context manager that, for every function
defined in the given modules (module-level functions, methods of classes defined
there, and the functions their decorators wrap), re-binds the names ``float``
and ``float32`` to ``double`` and ``float64`` in the function's code:

    x.float()            ->  x.double()
    torch.float32        ->  torch.float64
    torch.float          ->  torch.double
    float("-inf")        ->  double("-inf")   (``double`` is bound to the builtin float meanwhile)

The operations and their order are the reference's own; only the dtype they name
changes, so with float64 inputs every step runs in float64. The original code is
restored on exit. The swap is process-wide while the context is open (it edits the
function objects): use it around a reference call, not around concurrent work.
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import types
from typing import Iterator

RENAMES = {"float": "double", "float32": "float64"}
_ALIAS = "double"  # the global a renamed ``float(...)`` call resolves to


def _renamed(code: types.CodeType) -> types.CodeType:
    """``code`` with RENAMES applied to its names, recursively through nested code objects."""
    consts = tuple(_renamed(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    names = tuple(RENAMES.get(n, n) for n in code.co_names)
    return code.replace(co_names=names, co_consts=consts)


def _functions(module: types.ModuleType) -> list[types.FunctionType]:
    """Every function whose code lives in ``module``: module level, class members, what decorators wrap."""
    found: list[types.FunctionType] = []
    seen: set[int] = set()

    def add(obj) -> None:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            obj = obj.fget
        while callable(obj) and id(obj) not in seen:  # a decorator's wrapper, then what it wraps
            seen.add(id(obj))
            if isinstance(obj, types.FunctionType) and obj.__globals__ is vars(module):
                found.append(obj)  # (a decorator's wrapper copies __module__ but keeps its own globals)
            obj = getattr(obj, "__wrapped__", None)

    for obj in vars(module).values():
        if inspect.isclass(obj) and obj.__module__ == module.__name__:
            for member in vars(obj).values():
                add(member)
        elif isinstance(obj, types.FunctionType) or hasattr(type(obj), "__call__") and hasattr(obj, "__wrapped__"):
            add(obj)
    return found


@contextlib.contextmanager
def float64_retyped(*modules: types.ModuleType) -> Iterator[None]:
    """Within the context, the functions of ``modules`` compute in float64 where they named float32."""
    for module in modules:
        if not isinstance(module, types.ModuleType):
            raise TypeError(f"float64_retyped takes modules, got {type(module).__name__}")
        if getattr(module, _ALIAS, builtins.float) is not builtins.float:
            raise ValueError(f"module {module.__name__} defines its own {_ALIAS!r}; it cannot be re-typed by renaming")
    saved: list[tuple[types.FunctionType, types.CodeType]] = []
    aliased: list[types.ModuleType] = []
    try:
        for module in modules:
            if not hasattr(module, _ALIAS):
                setattr(module, _ALIAS, builtins.float)
                aliased.append(module)
            for fn in _functions(module):
                saved.append((fn, fn.__code__))
                fn.__code__ = _renamed(fn.__code__)
        yield
    finally:
        for fn, code in reversed(saved):
            fn.__code__ = code
        for module in aliased:
            delattr(module, _ALIAS)
