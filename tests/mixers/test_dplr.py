"""RWKV-7: Table 2.1's form (class diag_rank1, the existing per-key chunk form) and the general
diagonal-plus-low-rank form with a per-key in-context rate and a separate removal key (class dplr),
against the derivation, each other and FLA's generalized-delta-rule recurrence."""
from __future__ import annotations

import pytest
import torch

from assocmem.memories import GD, L2, L2Decay, Matrix, RemoveReplace, derive
from assocmem.mixers import LayerOptions, MixerSpec, get_preset
from assocmem.mixers.external import external_references
from assocmem.mixers.lower import family_name, hand_written, lower
from assocmem.mixers.ops import delta
from assocmem.mixers.ops.dplr import chunk_dplr, recurrent_dplr
from assocmem.mixers.verify import Case, make_case, max_abs_error, run, verify

pytestmark = pytest.mark.usefixtures("one_thread")
F64 = torch.float64


def _inputs(B=2, T=37, H=2, K=8, V=5, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    unit = lambda x: torch.nn.functional.normalize(x, dim=-1)  # noqa: E731
    x = dict(q=unit(r(B, T, H, K)), k=unit(r(B, T, H, K)), v=r(B, T, H, V), removal_key=unit(r(B, T, H, K)),
             log_alpha=torch.nn.functional.logsigmoid(r(B, T, H, K) + 3), beta=torch.sigmoid(r(B, T, H, K)))
    x = {n: t.to(dtype).requires_grad_(True) for n, t in x.items()}
    return x, (0.1 * r(B, H, K, V)).to(dtype)


@pytest.mark.parametrize("T", [1, 15, 16, 17, 53])
def test_chunk_equals_recurrent_float64(T):
    x, S0 = _inputs(T=T, seed=T)
    a, Sa = recurrent_dplr(**x, initial_state=S0, output_final_state=True)
    b, Sb = chunk_dplr(**x, initial_state=S0, output_final_state=True, chunk_size=16)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    torch.testing.assert_close(Sa, Sb, atol=1e-12, rtol=0)
    cot = torch.randn_like(a)
    ga = torch.autograd.grad((a * cot).sum(), list(x.values()))
    gb = torch.autograd.grad((b * cot).sum(), list(x.values()))
    for name, u, w in zip(x, ga, gb):
        torch.testing.assert_close(u, w, atol=1e-12, rtol=0, msg=name)


def test_chunk_equals_recurrent_float32():
    x, S0 = _inputs(T=70, dtype=torch.float32, seed=3)
    a, _ = recurrent_dplr(**x, initial_state=S0)
    b, _ = chunk_dplr(**x, initial_state=S0)  # default chunk size
    torch.testing.assert_close(a, b)


def test_state_passing():
    x, S0 = _inputs(T=40, seed=5)
    x = {n: t.detach() for n, t in x.items()}
    o, S = chunk_dplr(**x, initial_state=S0, output_final_state=True, chunk_size=8)
    o1, S1 = chunk_dplr(**{n: t[:, :19] for n, t in x.items()}, initial_state=S0, output_final_state=True,
                        chunk_size=8)
    o2, S2 = chunk_dplr(**{n: t[:, 19:] for n, t in x.items()}, initial_state=S1, output_final_state=True,
                        chunk_size=8)
    torch.testing.assert_close(torch.cat([o1, o2], 1), o, atol=1e-13, rtol=0)
    torch.testing.assert_close(S2, S, atol=1e-13, rtol=0)


def test_table_2_1_form_is_the_special_case():
    """κ = k and one rate per head: (diag(α) − β k kᵀ) S + β k vᵀ, the joint delta rule of delta.py."""
    x, S0 = _inputs(T=29, seed=7)
    x = {n: t.detach() for n, t in x.items()}
    beta = x["beta"][..., 0]  # (B, T, H)
    a, Sa = recurrent_dplr(x["q"], x["k"], x["v"], log_alpha=x["log_alpha"], beta=beta, initial_state=S0,
                           output_final_state=True)
    b, Sb = delta.recurrent_delta_rule_joint(x["q"], x["k"], x["v"], log_alpha=x["log_alpha"], beta=beta,
                                             initial_state=S0, output_final_state=True)
    torch.testing.assert_close(a, b, atol=1e-14, rtol=0)
    torch.testing.assert_close(Sa, Sb, atol=1e-14, rtol=0)


def test_presets_lower_to_their_classes():
    """rwkv7 (Table 2.1) is the joint per-key delta rule: the existing chunk class; rwkv7_dplr its own."""
    table, general = get_preset("rwkv7"), get_preset("rwkv7_dplr")
    assert table.algebra == "diag_rank1" and lower(table).fn is delta.chunk_delta_rule_joint
    assert general.algebra == "dplr" and family_name(general) == "dplr" and lower(general).name == "chunk"
    assert hand_written(general)[0] == "recurrent_dplr"
    assert "removal key κ_t" in derive(general).describe()
    refs = [r.name for r in external_references(general)] + [r.name for r in external_references(table)]
    assert refs.count("fla:generalized_delta_rule/dplr/dplr_recurrence") == 2


@pytest.mark.parametrize("name", ["rwkv7", "rwkv7_dplr"])
def test_verify_against_fla_in_float64(name):
    """Every pair passes; FLA's dplr_recurrence, re-typed to float64, agrees to 1e-12."""
    results = verify(name, T=45)
    assert all(r.passed for r in results), [(r.pair, r.max_abs_error) for r in results if not r.passed]
    fla = [r for r in results if "dplr_recurrence" in r.pair]
    assert fla and fla[0].max_abs_error <= 1e-12 and fla[0].tolerance <= 1e-12


def test_remove_replace_with_k_as_removal_key_is_the_l2_bias():
    """ℓ = ½‖Sᵀκ‖² − ⟨Sᵀk, v⟩ at κ = k has the gradient of ½‖Sᵀk − v‖²: the same derived update."""
    layer = LayerOptions(num_heads=2, head_dim=8, qk_norm="l2", lr_gate="sigmoid")
    two = MixerSpec(memory=Matrix(), bias=RemoveReplace(), retention=L2Decay(gate="key"), optimizer=GD(rate="key"),
                    layer=layer)
    one = two.model_copy(update={"bias": L2()})
    case = make_case(two, T=20, seed=4)
    kw = {n: t.detach().requires_grad_(True) for n, t in case.tensors.items() if n != "removal_key"}
    with_kappa = Case({**kw, "removal_key": kw["k"].detach().clone().requires_grad_(True)}, case.initial_state, None)
    without = Case(kw, case.initial_state, None)
    a, b = run(derive(two), with_kappa), run(derive(one), without)
    assert max_abs_error(a, b, ("q", "v", "log_alpha", "beta")) <= 1e-13
    # k enters twice (write and removal key): their gradients add up to the ℓ2 bias's gradient of k
    torch.testing.assert_close(a["grad"]["k"] + a["grad"]["removal_key"], b["grad"]["k"], atol=1e-13, rtol=0)


def test_rate_and_removal_key_are_checked():
    with pytest.raises(ValueError, match="rate='key'.*matrix memory"):
        MixerSpec.model_validate({"memory": {"kind": "mlp", "hidden": 4}, "bias": {"kind": "l2"},
                                  "optimizer": {"kind": "gd", "rate": "key"}})
    with pytest.raises(ValueError, match="lr_gate='dt'"):
        MixerSpec.model_validate({"bias": {"kind": "l2"}, "retention": {"kind": "l2_decay"},
                                  "optimizer": {"kind": "gd", "rate": "key"}, "layer": {"lr_gate": "dt"}})
    x, S0 = _inputs(T=5)
    with pytest.raises(ValueError, match=r"removal_key must be None or \[B, T, H, K\]"):
        recurrent_dplr(x["q"], x["k"], x["v"], removal_key=x["removal_key"][..., :3])
    with pytest.raises(ValueError, match="removal_key is required"):
        derive(get_preset("rwkv7_dplr"))(x["q"], x["k"], x["v"], log_alpha=x["log_alpha"], beta=x["beta"])
    with pytest.raises(ValueError, match=r"beta has shape .* \[B, T, H, K\]"):
        derive(get_preset("rwkv7_dplr"))(x["q"], x["k"], x["v"], log_alpha=x["log_alpha"], beta=x["beta"][..., 0],
                                         removal_key=x["removal_key"])
