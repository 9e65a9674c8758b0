"""Mamba (Gu & Dao 2023): the selective class, its ops, its layer's init and the MambaForCausalLM converter.

The layer against transformers' MambaMixer weight for weight is tests/layers/test_layer_pairs.py (the
"MambaMixer" case of mixers/convert/cases.py); verify, causality, decode and packing pick the preset up
from their preset lists."""
from __future__ import annotations


import math

import pytest
import torch
import torch.nn.functional as F

from assocmem.memories import GD, MLP, DotProduct, L2Decay, Matrix, derive
from assocmem.mixers import MixerSpec, get_preset
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.lower import available_forms, lower
from assocmem.mixers.ops import selective
from assocmem.mixers.retype import float64_retyped
from assocmem.mixers.spec import MambaOptions
from assocmem.mixers.verify import make_case, max_abs_error, run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_mamba_is_the_selective_class_with_scan_forms():
    spec = get_preset("mamba")
    assert spec.algebra == "selective"
    assert available_forms(spec) == ["selective_scan", "recurrent"]
    with pytest.raises(ValueError, match="form 'chunk' is not available.*class is 'selective'"):
        lower(spec, "chunk")
    assert "Mamba's selective SSM" in derive(spec).describe()


@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("form", ["recurrent", "selective_scan"])
def test_derived_equals_the_forms_in_float64(form, with_state):
    """The autograd derivation of the spec = the hand-written recurrence and the block scan, at 1e-12
    (outputs, final states, every input gradient), at a length that is not a multiple of the block."""
    spec = get_preset("mamba")
    case = make_case(spec, T=37, H=2, K=5, V=7, with_state=with_state)
    want = run(derive(spec), case, state_grad=with_state)
    got = run(lower(spec, form).fn, case, state_grad=with_state)
    assert max_abs_error(want, got) <= 1e-12


def test_hand_written_recurrence_is_the_paper_equation():
    """h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t, y_t = C_t h_t (Gu & Dao 2023, eq. 2 with ZOH's exp(ΔA) and
    Euler's ΔB), written out per channel d and state entry n: the op with q = C, k = B, v = Δ x."""
    g = torch.Generator().manual_seed(0)
    Bsz, T, D, N = 2, 9, 3, 4
    x, dt = torch.randn(Bsz, T, D, generator=g, dtype=torch.float64), F.softplus(torch.randn(Bsz, T, D, generator=g, dtype=torch.float64))
    Bm, Cm = torch.randn(Bsz, T, N, generator=g, dtype=torch.float64), torch.randn(Bsz, T, N, generator=g, dtype=torch.float64)
    A = -torch.exp(torch.randn(D, N, generator=g, dtype=torch.float64))
    h = torch.zeros(Bsz, D, N, dtype=torch.float64)
    ys = []
    for t in range(T):
        for d in range(D):
            for n in range(N):
                h[:, d, n] = torch.exp(dt[:, t, d] * A[d, n]) * h[:, d, n] + dt[:, t, d] * Bm[:, t, n] * x[:, t, d]
        ys.append(torch.einsum("bdn,bn->bd", h, Cm[:, t]))
    log_alpha = (dt[:, :, None, :] * A.t()).unsqueeze(2)  # [B, T, 1, N, D]
    o, S = selective.recurrent_selective(Cm[:, :, None], Bm[:, :, None], (dt * x)[:, :, None], log_alpha=log_alpha,
                                         scale=1.0, output_final_state=True)
    torch.testing.assert_close(o[:, :, 0], torch.stack(ys, 1), atol=1e-12, rtol=0)
    torch.testing.assert_close(S[:, 0], h.transpose(1, 2), atol=1e-12, rtol=0)


@pytest.mark.slow
def test_compiled_scan_equals_eager():
    spec = get_preset("mamba")
    case = make_case(spec, T=37, H=2, K=5, V=7)
    eager, fused = lower(spec, "selective_scan"), lower(spec, "selective_scan", compile=True)
    assert fused.compiled
    assert max_abs_error(run(eager.fn, case), run(fused.fn, case)) <= 1e-12


def test_the_op_names_a_wrong_decay_layout():
    q = torch.randn(1, 3, 1, 4)
    with pytest.raises(ValueError, match=r"log_alpha must be \[B, T, H, K, V\] = \(1, 3, 1, 4, 5\)"):
        selective.scan_selective(q, q, torch.randn(1, 3, 1, 5), log_alpha=torch.zeros(1, 3, 1, 4))


def test_the_entry_gate_needs_a_matrix_memory_and_a_gradient_step():
    with pytest.raises(ValueError, match="gate='entry'.*needs a matrix memory"):
        MixerSpec(memory=MLP(hidden=4), bias=DotProduct(), retention=L2Decay(gate="entry"), optimizer=GD())
    assert MixerSpec(memory=Matrix(), bias=DotProduct(), retention=L2Decay(gate="entry"),
                     optimizer=GD(steps=2)).algebra == "scan"  # two steps: not the published single write


def test_mamba_init():
    """A = −(1..N) per channel, D = 1, dt_proj's weight in ±dt_scale·R^(−1/2), softplus(dt_bias) = Δ₀ in
    [dt_min, dt_max]; the model's init of linear maps leaves them (they are not nn.Linear)."""
    torch.manual_seed(0)
    m = build_mixer(get_preset("mamba"), 64)
    assert (m.D_inner, m.N, m.R) == (128, 16, 4)
    torch.testing.assert_close(-torch.exp(m.A_log), -torch.arange(1.0, 17.0).expand(128, 16))
    assert torch.all(m.D == 1)
    assert m.dt_proj.abs().max() <= 4 ** -0.5
    dt = F.softplus(m.dt_bias.detach())
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 0.1 * (1 + 1e-5)
    assert dt.log().std() > 0.5  # log-uniform over two decades: std ln(100)/√12 ≈ 1.33
    const = MixerSpec.model_validate({**get_preset("mamba").model_dump(),
                                      "layer": {**get_preset("mamba").layer.model_dump(),
                                                "mamba": {"dt_init": "constant", "dt_rank": 8}}})
    assert torch.all(build_mixer(const, 64).dt_proj == 8 ** -0.5)


def test_mamba_options_refuse_bad_values():
    with pytest.raises(ValueError, match="dt_min = 0.5 must not exceed dt_max = 0.1"):
        MambaOptions(dt_min=0.5)
    with pytest.raises(ValueError, match="dt_rank must be 'auto' or a positive int"):
        MambaOptions(dt_rank=0)
    assert MambaOptions().rank(768) == 48 and MambaOptions().rank(33) == 3


def _with_mamba(**options) -> MixerSpec:
    data = get_preset("mamba").model_dump()
    data["layer"]["mamba"].update(options)
    return MixerSpec.model_validate(data)


@torch.no_grad()
def test_dt_limit_clamps_delta_after_the_softplus():
    """Δ far below the floor of dt_limit = (0.05, 0.2) is the floor: the layer equals the unclamped layer whose
    Δ is softplus(softplus⁻¹(0.05)) = 0.05 everywhere; a limit that clamps nothing changes nothing."""
    torch.manual_seed(0)
    clamped = build_mixer(_with_mamba(dt_limit=(0.05, 0.2)), 32).double()
    free = build_mixer(_with_mamba(), 32).double()
    free.load_state_dict(clamped.state_dict())
    with torch.no_grad():
        clamped.dt_proj.zero_(), clamped.dt_bias.fill_(-30.0)  # Δ = softplus(−30) ≈ 1e-13 < 0.05
        free.dt_proj.zero_(), free.dt_bias.fill_(math.log(math.expm1(0.05)))  # Δ = 0.05
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    torch.testing.assert_close(clamped(x)[0], free(x)[0], atol=1e-12, rtol=0)
    wide = build_mixer(_with_mamba(dt_limit=(0.0, 1e6)), 32).double()
    wide.load_state_dict(free.state_dict())
    assert torch.equal(wide(x)[0], free(x)[0])
    with pytest.raises(ValueError, match="dt_limit .* must be \\(low, high\\) with 0 <= low < high"):
        MambaOptions(dt_limit=(0.2, 0.1))


def test_the_mamba_layer_refuses_another_class():
    from assocmem.mixers.mamba import Mamba

    with pytest.raises(ValueError, match="selective-class spec.*class 'hebbian'"):
        Mamba(get_preset("mamba2"), 32)


# ------------------------------------------------------------------ MambaForCausalLM


def _tiny_mamba_lm(dtype):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=50, hidden_size=24, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=3,
                      time_step_rank=2, layer_norm_epsilon=1e-5)
    model = MambaForCausalLM(cfg).to(dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # no mapping error hides behind ones or zeros
            p.add_(0.2 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_from_hf_mamba_folder_computes_the_same_logits(tmp_path, dtype):
    modeling = pytest.importorskip("transformers.models.mamba.modeling_mamba")
    from assocmem.models.convert import from_hf_mamba

    retyped = float64_retyped(modeling) if dtype == torch.float64 else torch.no_grad()
    with retyped:
        source = _tiny_mamba_lm(dtype)
    source.save_pretrained(tmp_path)
    ours = from_hf_mamba(tmp_path).eval() if dtype == torch.float32 else from_hf_mamba(source).eval()
    ids = torch.randint(0, 50, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), (float64_retyped(modeling) if dtype == torch.float64 else torch.no_grad()):
        want = source(ids).logits
    got = ours(ids).logits.detach()
    tol = 1e-10 if dtype == torch.float64 else 1e-5 * float(want.abs().max())
    assert float((got - want).abs().max()) <= tol
    assert ours.config.hybrid_config.mlp_layers == [] and ours.model.layers[0].mixer.spec.name == "mamba"
    if dtype == torch.float32:  # greedy decoding through both caches
        mine = ours.generate(ids[:1, :5], max_new_tokens=6, do_sample=False, pad_token_id=0)
        theirs = source.generate(ids[:1, :5], max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert mine.tolist() == theirs.tolist()


def test_from_hf_mamba_refuses_another_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    from assocmem.models.convert import from_hf_mamba

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                         num_attention_heads=2))
    with pytest.raises(ValueError, match="cannot convert a LlamaForCausalLM; supported: MambaForCausalLM"):
        from_hf_mamba(llama)


