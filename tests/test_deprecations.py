"""Old import paths of moved public names: each still gives the same object, with a DeprecationWarning
that names the new path (memories/deprecation.py); unknown names still raise AttributeError."""
from __future__ import annotations

import importlib

import pytest

MOVED = [  # (old module, old name, new module, new name)
    ("assocmem.mixers.bench", "run_bench", "assocmem.training.bench.forms", "run_bench"),
    ("assocmem.mixers.bench", "chunk_flops", "assocmem.training.bench.forms", "chunk_flops"),
    ("assocmem.mixers.bench", "time_round_robin", "assocmem.training.bench.timing", "time_round_robin"),
    ("assocmem.mixers.bench", "measure_round_robin", "assocmem.training.bench.timing", "measure_round_robin"),
    ("assocmem.mixers.breakdown", "breakdown", "assocmem.training.bench.breakdown", "breakdown"),
    ("assocmem.mixers.breakdown", "KINDS", "assocmem.training.bench.breakdown", "KINDS"),
    ("assocmem.mixers.references", "hand_written", "assocmem.mixers.lower", "hand_written"),
    ("assocmem.mixers.references", "with_lr", "assocmem.mixers.lower", "with_lr"),
    ("assocmem.mixers.attention", "RMSNorm", "assocmem.mixers.norm", "RMSNorm"),
    ("assocmem.mixers.attention", "rope_angles", "assocmem.mixers.norm", "rope_angles"),
    ("assocmem.mixers.attention", "apply_rope", "assocmem.mixers.norm", "apply_rope"),
]


@pytest.mark.parametrize("old, name, new, new_name", MOVED, ids=lambda x: x if "." not in x else None)
def test_old_path_warns_and_returns_the_new_object(old, name, new, new_name):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to {new}\.{new_name}; .* removed in"):
        got = getattr(module, name)
    assert got is getattr(importlib.import_module(new), new_name)


SHIMS = ["assocmem.mixers.bench", "assocmem.mixers.breakdown", "assocmem.mixers.references", "assocmem.mixers.attention"]


@pytest.mark.parametrize("old", SHIMS)
def test_every_name_a_shim_forwards_exists_at_its_new_path(old):
    targets = importlib.import_module(old).__getattr__.targets
    assert targets
    for name, path in targets.items():
        module, attr = path.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), attr), f"{old}.{name} -> {path} does not exist"


def test_from_import_of_an_old_path_warns():
    with pytest.warns(DeprecationWarning, match="assocmem.training.bench.forms.markdown_table"):
        from assocmem.mixers.bench import markdown_table
    from assocmem.training.bench.forms import markdown_table as new
    assert markdown_table is new


def test_a_name_that_never_lived_there_raises():
    module = importlib.import_module("assocmem.mixers.bench")
    with pytest.raises(AttributeError, match="module 'assocmem.mixers.bench' has no attribute 'nothing'"):
        module.nothing  # noqa: B018
