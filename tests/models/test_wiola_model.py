"""The Wiola components inside the attention layer, the blocks and the presets (float64):
decode equals the full forward for the causal model (the paper's incremental-match test), the
as-written GCLA refuses a cache, ATM runs in training only, β = 0 without the gate is plain
attention, the causality probe flags exactly the as-written GCLA and ATM, and wiola-360m has the
shape the text gives."""
import math

import pytest
import torch

from assocmem.mixers.wiola import ATMOptions, GCLAOptions, SRPEOptions, WiolaAttention, WiolaRMSNorm
from assocmem.models import build_model, output_cache
from assocmem.models.presets import wiola_config
from assocmem.probes.causality import model_causality, model_causality_in_modes, probe_ids

TOL = dict(atol=1e-10, rtol=0)
SRPE = SRPEOptions(k_s=4.0, a_s=0.1, f_s=0.5)


def tiny(mode="causal", *, gcla_mode=None, atm_mode=None, vocab=64, seed=0):
    torch.manual_seed(seed)
    hc = wiola_config(32, 6, vocab, 4, 2, 32, 96, mode=mode, gcla_mode=gcla_mode, atm_mode=atm_mode)
    model = build_model(hc, dtype=torch.float64).eval()
    with torch.no_grad():  # move δ and φ off their init so that they matter (δ small: a large common
        for name, p in model.named_parameters():  # offset makes every token parallel, and ATM merges all)
            if name.endswith("offset"):
                p.normal_(0, 0.01)
            elif name.endswith("phi"):
                p.normal_(0, 0.3)
    return model


def ids(B, T, vocab=64, seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_causal_model_prefill_then_decode_equals_full():
    model, x = tiny(), ids(2, 14)
    full = model(x, use_cache=False).logits
    out = model(x[:, :6])                                   # two-chunk cached forward (paper §XIV) ...
    out2 = model(x[:, 6:9], cache=output_cache(out))
    pieces, cache = [out.logits, out2.logits], output_cache(out2)
    for t in range(9, 14):                                  # ... then token by token
        out = model(x[:, t:t + 1], cache=cache)
        pieces.append(out.logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, **TOL)


@torch.no_grad()
def test_causal_model_left_padding_equals_unpadded_rows():
    model = tiny()
    rows = [ids(1, 11, seed=2)[0], ids(1, 7, seed=3)[0]]
    batch = torch.zeros(2, 11, dtype=torch.long)
    mask = torch.zeros(2, 11, dtype=torch.long)
    for i, r in enumerate(rows):
        batch[i, 11 - len(r):], mask[i, 11 - len(r):] = r, 1
    logits = model(batch, attention_mask=mask).logits
    for i, r in enumerate(rows):
        torch.testing.assert_close(logits[i, 11 - len(r):], model(r[None]).logits[0], **TOL)


@torch.no_grad()
def test_as_written_gcla_refuses_to_decode():
    model = tiny("as_written")
    out = model(ids(2, 8))
    with pytest.raises(ValueError, match="mean over all T positions.*cannot continue from a cache"):
        model(ids(2, 1), cache=output_cache(out))


@torch.no_grad()
def test_atm_runs_in_training_only_and_refuses_a_cache_there():
    model, x = tiny("as_written", gcla_mode="causal"), probe_ids(64, 12)
    evaluated = model(x).logits
    model.train()
    trained = model(x).logits
    assert (trained - evaluated).abs().max() > 1e-4          # row 1 (a a b b ...) merges in training
    torch.testing.assert_close(trained[0], evaluated[0], **TOL)  # row 0 (random ids) has no pair above τ
    with pytest.raises(ValueError, match="token merging"):
        model(x[:, :1], cache=output_cache(model(x)))


@torch.no_grad()
def test_threshold_above_one_is_the_model_without_atm():
    model, x = tiny(), probe_ids(64, 12)
    model.train()
    for block in model.model.layers:
        if block.mixer.token_merge is not None:
            block.mixer.token_merge = ATMOptions(mode="causal", tau=1.01)
    merged = model(x).logits
    model.eval()
    torch.testing.assert_close(merged, model(x).logits, atol=1e-13, rtol=0)


def _attention(**options):
    torch.manual_seed(0)
    return WiolaAttention(16, num_heads=4, head_dim=4, num_kv_heads=2, srpe=SRPE, **options).double()


@torch.no_grad()
def test_gcla_with_beta_zero_and_no_gate_is_plain_attention():
    plain = _attention()
    gcla = _attention(cross_layer=GCLAOptions(mode="causal"))
    gcla.load_state_dict({**plain.state_dict(), **{k: v for k, v in gcla.state_dict().items() if "context" in k}})
    gcla.context.phi.fill_(-math.inf)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    streams = [torch.randn(2, 9, 16, dtype=torch.float64), x]
    assert torch.equal(gcla(x, streams=streams)[0], plain(x)[0])


@torch.no_grad()
def test_output_gate_multiplies_the_heads_before_the_output_projection():
    gated = _attention(output_gate=True)
    plain = _attention()
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if "gate" not in k})
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    captured = {}
    plain.o_proj.register_forward_pre_hook(lambda m, a: captured.setdefault("o", a[0]))
    plain(x)
    expected = torch.nn.functional.linear(captured["o"] * torch.sigmoid(x @ gated.gate_proj.weight.T),
                                          gated.o_proj.weight)
    torch.testing.assert_close(gated(x)[0], expected, atol=1e-14, rtol=0)


def test_token_merge_is_refused_with_short_conv():
    with pytest.raises(ValueError, match="token_merge.*short_conv"):
        _attention(short_conv=True, token_merge=ATMOptions(mode="causal", tau=0.5))


@torch.no_grad()
def test_srpe_attention_prefill_then_decode_equals_full():
    attn, x = _attention(), torch.randn(2, 11, 16, dtype=torch.float64)
    full, _ = attn(x)
    y, state = attn(x[:, :5])
    pieces = [y]
    for t in range(5, 11):
        y, state = attn(x[:, t:t + 1], state=state)
        pieces.append(y)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-13, rtol=0)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_probe_passes_the_causal_model_bit_for_bit(mode):
    report, = model_causality_in_modes(tiny(), probe_ids(64, 12), [mode])
    assert report.causal and report.max_leak == 0.0


def test_probe_flags_as_written_gcla_at_position_zero():
    report, = model_causality_in_modes(tiny("causal", gcla_mode="as_written"), ids(2, 10), ["eval"])
    assert report.first_leak == 0 and report.max_leak > 1e-6


def test_probe_flags_as_written_atm_at_its_first_pair_in_training_only():
    model = tiny("causal", atm_mode="as_written")
    x = ids(2, 12)
    x[:, 6] = x[:, 5]  # the first adjacent duplicate: tokens 5 and 6
    assert bool((x[:, 1:6] != x[:, :5]).all())
    train, = model_causality_in_modes(model, x, ["train"])
    assert train.first_leak == 5 and train.max_leak > 1e-6
    evaluated, = model_causality_in_modes(model, x, ["eval"])
    assert evaluated.causal and evaluated.max_leak == 0.0


@torch.no_grad()
def test_save_and_load_round_trip(tmp_path):
    from transformers import AutoModelForCausalLM

    model, x = tiny(), ids(2, 10)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    torch.testing.assert_close(loaded(x).logits, model(x).logits, atol=0, rtol=0)
    norms = [m for m in loaded.modules() if isinstance(m, WiolaRMSNorm)]
    assert len(norms) == 13 and all(bool(n.offset.abs().sum() > 0) for n in norms)


def test_wiola_360m_shape():
    with torch.device("meta"):
        model = build_model("wiola-360m")
    layers = model.model.layers
    assert len(layers) == 16 and model.config.hidden_size == 1024 and model.config.vocab_size == 32000
    attn = layers[0].mixer
    assert (attn.H, attn.Hkv, attn.K) == (16, 4, 64) and isinstance(attn.srpe, SRPEOptions)
    assert [i for i, b in enumerate(layers) if b.mixer.token_merge is not None] == [5, 6, 7, 8, 9]
    offsets = sum(p.numel() for n, p in model.named_parameters() if n.endswith("offset"))
    assert offsets == 2 * 16 * 1024 + 1024  # the paper's 2·L·d = 32,768, plus the final norm
    assert sum(p.numel() for p in model.parameters()) == 351_602_704
    kv_bytes_bf16 = 2 * sum(b.mixer.state_size(2048) for b in layers)
    assert kv_bytes_bf16 == 2 * 16 * 4 * 64 * 2048 * 2 + 16 * 2 * (2 * 1024 + 1)  # 33.55 MB + GCLA sums
