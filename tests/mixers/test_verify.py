"""verify(): every preset's derived update equals its hand-written recurrence,
every exact lowered form and the installed external references (outputs,
final states, input gradients), in float64."""
import json

import pytest
import torch
import transformers
from packaging.version import Version

from assocmem.memories import derive
from assocmem.mixers import MixerSpec, get_preset, list_presets
from assocmem.mixers.external import F32_ATOL
from assocmem.mixers.lower import lower
from assocmem.mixers.lower import derived, hand_written
from assocmem.mixers.verify import EXACT_ATOL, make_case, max_abs_error, run, verify
from assocmem.training.cli import main as cli

PRESETS = list_presets()


@pytest.fixture(scope="module")
def results():
    return {name: verify(name, T=65) for name in PRESETS}


@pytest.mark.parametrize("name", PRESETS)
def test_every_pair_passes(results, name):
    bad = [(r.pair, r.max_abs_error) for r in results[name] if not r.passed]
    assert not bad
    pairs = [r.pair for r in results[name]]
    assert any("(hand-written)" in p for p in pairs), "every preset has a hand-written recurrence"
    assert any("form:" in p for p in pairs), "every preset has at least one exact lowered form"


# transformers < 5.20 builds the gated-delta decay mask with ``.float()``, which the float64
# re-binding of mixers/external.py cannot reach; < 5.15 has no module-level mamba2_chunk_scan.
TRANSFORMERS = Version(transformers.__version__)


def test_external_references_are_exercised(results):
    names = {r.pair for rs in results.values() for r in rs}
    refs = ["transformers:qwen3_next.torch_chunk_gated_delta_rule",
            "transformers:qwen3_next.torch_recurrent_gated_delta_rule"]
    if TRANSFORMERS >= Version("5.15"):
        refs.append("transformers:mamba2.mamba2_chunk_scan")
    for ref in refs:
        assert any(ref in n for n in names), ref


def test_gated_deltanet_composition_order(results):
    """RetainThenGD reproduces the published GDN and the transformers reference to 1e-12;
    the joint GD step (thesis eq. 2.58-2.60) does not."""
    gdn = {r.pair: r for r in results["gated_deltanet"]}
    float64_refs = TRANSFORMERS >= Version("5.20")
    for pair, r in gdn.items():
        if "transformers:qwen3_next" in pair and r.tolerance == F32_ATOL:  # float32 inside (< 5.20 only)
            assert not float64_refs and r.passed, (pair, r.max_abs_error)
        elif "transformers:qwen3_next" in pair or "recurrent_delta_rule (hand-written)" in pair:
            assert r.max_abs_error <= 1e-12, (pair, r.max_abs_error)
    differs = [r for r in results["gated_deltanet"] if r.expect == "differ"]
    assert differs and all(r.max_abs_error > 1e-3 for r in differs)
    joint = [r for r in results["gated_deltanet_joint"] if r.expect == "differ"]
    assert joint and all(r.passed and r.max_abs_error > 1e-3 for r in joint)


@pytest.mark.parametrize("T", [1, 2, 7, 64])
@pytest.mark.parametrize("name", PRESETS)
def test_derived_equals_hand_written_across_lengths(name, T):
    spec = get_preset(name)
    case = make_case(spec, B=2, T=T, H=3, K=4, V=5, seed=T)
    _, fn = hand_written(spec)
    assert max_abs_error(run(derived(spec), case), run(fn, case)) <= EXACT_ATOL


USER_SPEC = """
name: huber_key_momentum
memory: {kind: matrix}
bias: {kind: huber, delta: 0.5}
retention: {kind: l2_decay, gate: key}
optimizer: {kind: momentum, eta: 0.8, lr: 0.5}
layer: {num_heads: 2, head_dim: 8, qk_norm: l2, lr_gate: sigmoid}
"""


def test_a_new_mixer_defined_in_yaml(tmp_path):
    spec = MixerSpec.from_yaml(USER_SPEC)
    assert spec.algebra == "scan" and derive(spec).describe() == "generic gradient step"
    # verified: derived vs its compiled scan form (no hand-written rule exists for it)
    rs = verify(spec, T=9)
    assert [r.pair for r in rs] == ["derived vs form:scan"] and rs[0].passed
    # the approximate form is opt-in and exact with chunks of one token
    case = make_case(spec, B=1, T=6, H=2, K=4, V=3)
    approx = lower(spec, "chunk_approx")
    assert not approx.exact
    assert max_abs_error(run(derive(spec), case), run(approx.fn, case, extra={"chunk_size": 1})) <= 1e-12
    # runs as a layer on a batch, with state passing
    from assocmem.mixers.layer import build_mixer

    torch.manual_seed(0)
    layer = build_mixer(spec, d_model=16).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    y, _ = layer(x)
    y1, s1 = layer(x[:, :4])
    y2, _ = layer(x[:, 4:], state=s1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, atol=1e-12, rtol=0)
    # and from a file through the CLI
    path = tmp_path / "mine.yaml"
    path.write_text(USER_SPEC)
    assert cli(["verify", str(path), "--seq-len", "5", "--json", str(tmp_path / "v.json")]) == 0
    rows = json.loads((tmp_path / "v.json").read_text())
    assert rows and set(rows[0]) >= {"preset", "pair", "max_abs_error", "passed"}


def test_verify_cli_exits_nonzero_on_mismatch(monkeypatch, capsys):
    import assocmem.mixers.verify as v

    real = v.hand_written

    def broken(spec):
        name, fn = real(spec)
        return name, lambda q, k, v_, **kw: (lambda o, s: (o * 1.001, s))(*fn(q, k, v_, **kw))

    monkeypatch.setattr(v, "hand_written", broken)
    assert cli(["verify", "softmax", "--seq-len", "4"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_derive_cli_prints_the_update(capsys):
    assert cli(["derive", "gated_deltanet"]) == 0
    out = capsys.readouterr().out
    assert "M_t = α_t M_{t-1}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ" in out and "class:     delta" in out
