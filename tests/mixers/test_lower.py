"""The one class table (mixers/lower.py): every class of every valid spec has its row there and
nowhere else; KDA lowers to its exact chunk form."""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from assocmem.memories import (
    GD, KL, L1, L2, MLP, CharacteristicFunction, ClosedForm, Diagonal, DotProduct, Huber, Implicit, L2Decay, Lp,
    Matrix, Momentum, NadarayaWatson, NonParametric, NoRetention, Proximal, RemoveReplace, RetainThenGD, Spectral,
    Window, derive,
)
from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.mixers.lower import FAMILIES, FORMS, available_forms, family_of, hand_written, lower
from assocmem.mixers.ops import delta
from assocmem.mixers.verify import verify

ROOT = Path(__file__).resolve().parents[2]
AXES = dict(
    memory=[Matrix(), Matrix(norm="layernorm_residual"), Diagonal(), MLP(hidden=4), NonParametric(), Spectral()],
    bias=[DotProduct(), L2(), RemoveReplace(), Lp(p=3.0), Huber(delta=1.0), NadarayaWatson(), CharacteristicFunction()],
    retention=[NoRetention(), L2Decay(gate="scalar"), L2Decay(gate="key"), L2Decay(gate="fixed"), L2Decay(gate="entry"),
               Proximal(), KL(), L1(lam=0.1), Window(size=8)],
    optimizer=[GD(), GD(steps=2), GD(rate="key"), RetainThenGD(), RetainThenGD(steps=3), Implicit(), Implicit(steps=2),
               Momentum(), ClosedForm()],
)


def _valid_specs() -> list[MixerSpec]:
    specs = []
    for values in itertools.product(*AXES.values()):
        try:
            specs.append(MixerSpec(**dict(zip(AXES, values))))
        except ValueError:
            continue  # the axes do not compose (memories/algebra.check_axes)
    return specs


SPECS = _valid_specs()


def test_every_class_of_every_valid_spec_has_its_row():
    classes = {s.algebra for s in SPECS}
    assert classes == set(FORMS) == {"hebbian", "delta", "diag_rank1", "dplr", "spectral", "nonparametric", "selective",
                                     "scan"}
    assert len(SPECS) > 50
    for spec in SPECS:
        fam = family_of(spec)
        assert fam.cls == spec.algebra and available_forms(spec) == list(FORMS[spec.algebra])
        for form in fam.forms:
            lowered = lower(spec, form)
            assert (lowered.name, lowered.cls, lowered.exact) == (form, spec.algebra, form != "chunk_approx")
            assert callable(lowered.fn)


def test_each_row_names_its_published_recurrence():
    for name, fam in FAMILIES.items():
        assert fam.forms == FORMS[fam.cls]
        if fam.cls == "scan":
            assert fam.hand_written is None and fam.default_chunk is None
            continue
        assert fam.hand_written == fam.ops["recurrent"].__name__, name
        assert (fam.default_chunk is not None) == ("chunk" in fam.ops), name


def _kda(lr: float = 1.0) -> MixerSpec:
    return MixerSpec(name="kda_spec", memory=Matrix(), bias=L2(), retention=L2Decay(gate="key"),
                     optimizer=RetainThenGD(lr=lr), layer=LayerOptions(qk_norm="l2", lr_gate="sigmoid"))


def test_kda_lowers_to_chunk_kda():
    spec = _kda()
    assert spec.algebra == "delta" and family_of(spec) is FAMILIES["kda"]
    assert lower(spec).fn is delta.chunk_kda and lower(spec, "recurrent").fn is delta.recurrent_kda
    assert hand_written(spec) == ("recurrent_kda", delta.recurrent_kda)
    assert derive(spec).describe() == "M_t = M_{t-1} diag(α_t)(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ  (Kimi Delta Attention)"


def test_kda_forms_equal_its_derivation():
    """derived vs recurrent_kda vs chunk_kda (float64, outputs, final states, gradients), with a base lr."""
    results = verify(_kda(lr=0.7), T=37, extras=False)
    assert [r.pair for r in results][:2] == ["derived vs recurrent_kda (hand-written)", "derived vs form:chunk"]
    assert all(r.passed and r.max_abs_error < 1e-12 for r in results), results  # + kimi_linear and FLA references


# ------------------------------------------------------------------ nowhere else
def _source_files():
    for floor in ("memories", "mixers", "models", "training", "probes"):
        yield from sorted((ROOT / floor).rglob("*.py"))


def _reads_algebra(node: ast.AST, held: set[str] = frozenset()) -> bool:
    """Whether ``node`` reads a class: ``x.algebra``, ``algebra_class(x)`` or a name assigned from one."""
    return any((isinstance(n, ast.Attribute) and n.attr == "algebra")
               or (isinstance(n, ast.Call) and getattr(n.func, "id", None) == "algebra_class")
               or (isinstance(n, ast.Name) and n.id in held) for n in ast.walk(node))


def _names_holding_the_class(tree: ast.AST) -> set[str]:
    """Names assigned from a class read (``cls = spec.algebra``, ``cls, r = spec.algebra, spec.retention``)."""
    held = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and isinstance(
                    node.value, ast.Tuple) else [(target, node.value)]
                held |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _reads_algebra(v)}
    return held


def test_no_other_file_chooses_code_by_class():
    """Outside lower.py (and algebra.py / describe.py, which define and describe the classes) nothing
    compares a spec's class, looks anything up by it, or maps form names to ops."""
    allowed = {ROOT / "mixers" / "lower.py", ROOT / "memories" / "algebra.py", ROOT / "memories" / "describe.py"}
    forms = {f for fs in FORMS.values() for f in fs}
    found = []
    for path in _source_files():
        if path in allowed:
            continue
        tree = ast.parse(path.read_text())
        held = _names_holding_the_class(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and _reads_algebra(node, held):
                found.append(f"{path.name}:{node.lineno} compares the class")
            if isinstance(node, ast.Subscript) and _reads_algebra(node.slice, held):
                found.append(f"{path.name}:{node.lineno} looks up by class")
            if isinstance(node, ast.Dict) and len(node.keys) > 1 and all(
                    isinstance(k, ast.Constant) and k.value in forms for k in node.keys):
                found.append(f"{path.name}:{node.lineno} maps forms to ops")
    assert found == []


@pytest.mark.parametrize("form", ["sdpa", "prefix_sum"])
def test_a_form_the_class_lacks_is_refused_with_the_forms_it_has(form):
    with pytest.raises(ValueError, match=r"class is 'delta'.*available forms: \['chunk', 'recurrent'\]"):
        lower(get_preset("gated_deltanet"), form)
