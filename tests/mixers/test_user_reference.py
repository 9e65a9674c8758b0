"""Your own hand-written rule in verify (docs/verification.md#your-own-reference): the docs' spec and rule
run as written, through the CLI (``reference:`` in the YAML) and through ``register_reference``; a rule
with the other composition order fails; a reference that cannot be imported is refused up front."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from assocmem.mixers import MixerSpec, register_reference
from assocmem.mixers.references import unregister_references, user_references
from assocmem.mixers.verify import verify

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "verification.md").read_text().split("## Your own reference", 1)[1].split("\n## ", 1)[0]


def block(lang: str, first_line: str) -> str:
    """The ``lang`` code block of the section that starts with ``first_line``."""
    found = [b for b in re.findall(rf"```{lang}\n(.*?)```", SECTION, flags=re.S) if b.startswith(first_line)]
    assert len(found) == 1, f"docs/verification.md: one {lang} block starting {first_line!r} expected"
    return found[0]


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """The docs' spec file and rule module in a folder on sys.path (as PYTHONPATH=. puts it)."""
    (tmp_path / "lp_key_momentum.yaml").write_text(block("yaml", "# lp_key_momentum.yaml"))
    (tmp_path / "my_rules.py").write_text(block("python", "# my_rules.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("my_rules", None)


def _cli(*argv, cwd, pythonpath):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "assocmem.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_derive_prints_the_update_the_docs_show(user_folder):
    done = _cli("derive", "lp_key_momentum.yaml", cwd=user_folder, pythonpath=str(user_folder))
    assert done.returncode == 0, done.stderr
    shown = re.search(r"^update: .*$", SECTION, flags=re.M).group(0)
    assert shown in done.stdout.splitlines()
    assert "reference: my_rules:lp_key_momentum" in done.stdout


@pytest.mark.slow  # a fresh process compiles the scan form
def test_verify_holds_the_yaml_reference_to_the_derivation_and_every_form(user_folder):
    done = _cli("verify", "lp_key_momentum.yaml", "--no-large", "--seq-len", "12", "--json", "v.json",
                cwd=user_folder, pythonpath=str(user_folder))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["pair"]: r for r in json.loads((user_folder / "v.json").read_text())}
    assert set(rows) == {"derived vs my_rules:lp_key_momentum (your reference)" + s for s in ("", " [no grad]",
                         " [float32, relative]")} | {"derived vs form:scan" + s for s in ("", " [no grad]",
                         " [float32, relative]")} | {"my_rules:lp_key_momentum vs form:scan"}
    assert all(r["passed"] for r in rows.values())


def test_register_reference_in_python_as_the_docs_show(user_folder):
    code = block("python", "from assocmem.mixers import MixerSpec, register_reference")
    code = code.replace("verify(spec, large=False)", "verify(spec, T=8, large=False)")  # a shorter sequence
    spec = MixerSpec.from_yaml("lp_key_momentum.yaml").model_copy(update={"reference": None})
    try:
        exec(compile(code, "docs/verification.md", "exec"), {})
    finally:
        unregister_references(spec)
    assert user_references(spec) == []


def _retain_then_step(q, k, v, *, beta, log_alpha, eta, scale=None, initial_state=None, output_final_state=False):
    """The docs' rule with the gradient taken at the retained memory diag(α_t) S_{t−1}: not what momentum does."""
    B, T, H, K = q.shape
    S, m = initial_state if initial_state is not None else (q.new_zeros(B, H, K, v.shape[-1]),) * 2
    outs = []
    for t in range(T):
        kept = log_alpha[:, t].exp()[..., None] * S
        e = torch.einsum("bhk,bhkv->bhv", k[:, t], kept) - v[:, t]
        g = 3 * e.sign() * e.abs().clamp(max=0.5) ** 2
        m = eta[:, t, :, None, None] * m - beta[:, t, :, None, None] * k[:, t, :, :, None] * g[:, :, None, :]
        S = kept + m
        outs.append(torch.einsum("bhk,bhkv->bhv", (scale or K ** -0.5) * q[:, t], S))
    return torch.stack(outs, 1), ((S, m) if output_final_state else None)


@pytest.mark.slow  # compiles the scan form
def test_a_rule_of_the_other_order_fails(user_folder):
    spec = MixerSpec.from_yaml("lp_key_momentum.yaml").model_copy(update={"reference": None, "name": "other_order"})
    register_reference("other_order", _retain_then_step, name="retain_then_step")
    try:
        results = {r.pair: r for r in verify(spec, T=8, extras=False)}
    finally:
        unregister_references("other_order")
    assert results["derived vs form:scan"].passed
    for pair in ("derived vs retain_then_step (your reference)", "retain_then_step vs form:scan"):
        assert not results[pair].passed and results[pair].max_abs_error > 1e-3, results[pair]


def test_a_reference_that_cannot_be_imported_is_refused_before_any_work(tmp_path):
    text = block("yaml", "# lp_key_momentum.yaml").replace("my_rules:lp_key_momentum", "no_such_module:rule")
    (tmp_path / "s.yaml").write_text(text)
    done = _cli("verify", "s.yaml", "--no-large", cwd=tmp_path, pythonpath=str(tmp_path))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "cannot import module 'no_such_module'" in done.stderr and "PYTHONPATH" in done.stderr


@pytest.mark.parametrize("bad", ["org/model", "./my_rules.py:rule", "my_rules", "my_rules:"])
def test_a_reference_is_a_python_name_only(bad):
    with pytest.raises(ValueError, match="reference must be 'package.module:function'"):
        MixerSpec(reference=bad)


def test_a_spec_without_reference_saves_as_before():
    spec = MixerSpec()
    assert "reference" not in spec.model_dump() and "reference" not in spec.to_yaml()
    mine = spec.model_copy(update={"reference": "my_rules:rule"})
    assert MixerSpec.from_yaml(mine.to_yaml()) == mine
