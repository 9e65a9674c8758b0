"""GCLA's cross-layer context (Wiola eqs. 20–27): as written it is the mean over all T positions,
seen by every query (leaks from position 0); causal, position t sees the as-written context of its
own prefix; β = 0 is the plain self-attention output; decode with running sums equals the full call."""
import math

import pytest
import torch

from assocmem.mixers.wiola import CrossLayerContext, GCLAOptions
from assocmem.probes.causality import check_causality

B, T, D, H, HKV, K, V = 2, 9, 10, 4, 2, 6, 5


def _ctx(mode, phi=0.4, seed=0):
    torch.manual_seed(seed)
    m = CrossLayerContext(D, GCLAOptions(mode=mode), num_heads=H, num_kv_heads=HKV, head_dim=K, value_dim=V).double()
    with torch.no_grad():
        m.phi.fill_(phi)
        m.k_ctx.weight.normal_(0, 0.5)
        m.v_ctx.weight.normal_(0, 0.5)
    return m


def _inputs(seed=1, n_streams=2, t=T):
    g = torch.Generator().manual_seed(seed)
    o_self = torch.randn(B, t, H, V, generator=g, dtype=torch.float64)
    q = torch.randn(B, t, H, K, generator=g, dtype=torch.float64)
    streams = [torch.randn(B, t, D, generator=g, dtype=torch.float64) for _ in range(n_streams)]
    return o_self, q, streams


def reference_as_written(m, o_self, q, streams):
    """Eqs. 20–27 head by head: s = mean_t X_t, K_ctx = C W_K, softmax(q K_gᵀ/√K) V_g, blend with β."""
    beta = 1 / (1 + math.exp(-float(m.phi.detach())))
    C = torch.stack([x.mean(1) for x in streams], dim=1)                     # [B, Λ, D]   eqs. 20–21
    Kc = (C @ m.k_ctx.weight.T).view(B, len(streams), HKV, K)               # eq. 24
    Vc = (C @ m.v_ctx.weight.T).view(B, len(streams), HKV, V)               # eq. 25
    out = torch.empty_like(o_self)
    for h in range(H):
        g = h // (H // HKV)
        scores = torch.einsum("btk,blk->btl", q[:, :, h], Kc[:, :, g]) / math.sqrt(K)
        o_ctx = torch.einsum("btl,blv->btv", scores.softmax(-1), Vc[:, :, g])  # eq. 26
        out[:, :, h] = (1 - beta) * o_self[:, :, h] + beta * o_ctx           # eq. 27
    return out


@pytest.mark.parametrize("n_streams", [1, 2])
def test_as_written_equals_eqs_20_to_27(n_streams):
    m = _ctx("as_written")
    o_self, q, streams = _inputs(n_streams=n_streams)
    out, state = m(o_self, q, streams, scale=None)
    torch.testing.assert_close(out, reference_as_written(m, o_self, q, streams), atol=1e-13, rtol=0)
    assert state is None


def test_causal_position_t_is_as_written_on_its_prefix():
    m = _ctx("causal")
    o_self, q, streams = _inputs()
    out, _ = m(o_self, q, streams, scale=None)
    for t in range(T):
        prefix = reference_as_written(m, o_self[:, :t + 1], q[:, :t + 1], [x[:, :t + 1] for x in streams])
        torch.testing.assert_close(out[:, t], prefix[:, t], atol=1e-13, rtol=0)


@pytest.mark.parametrize("mode", ["as_written", "causal"])
def test_beta_zero_is_the_self_attention_output(mode):
    m = _ctx(mode, phi=-math.inf)
    o_self, q, streams = _inputs()
    out, _ = m(o_self, q, streams, scale=None)
    assert torch.equal(out, o_self)


def test_causal_decode_equals_full_call():
    m = _ctx("causal")
    o_self, q, streams = _inputs()
    full, full_state = m(o_self, q, streams, scale=0.3)
    pieces, state = [], None
    for a, b in [(0, 4)] + [(t, t + 1) for t in range(4, T)]:
        out, state = m(o_self[:, a:b], q[:, a:b], [x[:, a:b] for x in streams], scale=0.3, state=state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-13, rtol=0)
    torch.testing.assert_close(state.sums, full_state.sums, atol=1e-13, rtol=0)
    assert state.count.tolist() == [T, T]


def test_causal_padding_leaves_padded_tokens_out():
    """Left padding: the real tokens' outputs equal those of the unpadded rows."""
    m = _ctx("causal")
    o_self, q, streams = _inputs()
    pad = 3
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, :pad] = False
    out, state = m(o_self, q, streams, scale=None, mask=mask)
    ref, _ = m(o_self[1:, pad:], q[1:, pad:], [x[1:, pad:] for x in streams], scale=None)
    torch.testing.assert_close(out[1, pad:], ref[0], atol=1e-13, rtol=0)
    assert state.count.tolist() == [T, T - pad]


def test_as_written_refuses_a_cache():
    m = _ctx("as_written")
    o_self, q, streams = _inputs()
    _, state = _ctx("causal")(o_self, q, streams, scale=None)
    with pytest.raises(ValueError, match="mean over all T positions.*cannot continue from a cache"):
        m(o_self[:, :1], q[:, :1], [x[:, :1] for x in streams], scale=None, state=state)


def _as_sequence_map(m):
    """x [B, T, D] -> output [B, T, H·V], every input a per-position map of x (so only GCLA mixes time)."""
    def run(kw):
        x = kw["x"]
        o_self = x[..., :V].unsqueeze(2).expand(B, x.shape[1], H, V)
        q = torch.cat([x, x], -1)[..., :K].unsqueeze(2).expand(B, x.shape[1], H, K)
        out, _ = m(o_self, q, [x, torch.tanh(x)], scale=None)
        return out.flatten(2)
    return run


@pytest.mark.parametrize("mode,first_leak", [("as_written", 0), ("causal", None)])
def test_causality_probe_flags_as_written_only(mode, first_leak):
    x = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    report = check_causality(_as_sequence_map(_ctx(mode)), {"x": x})
    assert report.first_leak == first_leak
    assert (report.max_leak > 1e-6) if first_leak is not None else report.max_leak == 0.0
