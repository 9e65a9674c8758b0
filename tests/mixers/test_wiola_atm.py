"""ATM (Wiola Algorithm 1, eqs. 30–32): the vectorised greedy merge equals Algorithm 1 run literally;
merge → attention → unmerge at full length with masks equals attention on the stacked T' tokens;
the causal variant equals attention over the merge of each query's own prefix; τ > 1 is plain
attention; the probe flags the written form at the first pair and passes the causal one bit for bit."""
import pytest
import torch
import torch.nn.functional as F

from assocmem.mixers.attention import Attention
from assocmem.mixers.ops.attention import sdpa_softmax_attention
from assocmem.mixers.wiola import (
    causal_merged_attention, merge_ratio, merge_starts, merge_tokens, unmerge,
)
from assocmem.probes.causality import check_causality

TAU, D = 0.92, 16


def algorithm1(x, tau):
    """Algorithm 1 of the paper, line by line, on one sequence x [T, d] -> (X' [T', d], merge map M)."""
    T = x.shape[0]
    rho = [float(F.cosine_similarity(x[i], x[i + 1], dim=0)) for i in range(T - 1)]  # line 1
    merged, groups, i = [], [], 0                                                      # line 2
    while i < T:                                                                       # line 3
        if i < T - 1 and rho[i] > tau:                                                 # line 4
            merged.append((x[i] + x[i + 1]) / 2)                                       # line 5
            groups.append((i, i + 1))                                                  # line 6
            i += 2
        else:
            merged.append(x[i])                                                        # line 8
            groups.append((i,))                                                        # line 9
            i += 1
    return torch.stack(merged), groups                                                 # line 12


def runs_of_near_duplicates(B=3, T=23, seed=0):
    """Hidden states with runs of 1–4 nearly parallel tokens (ρ > 0.99) between unrelated ones (ρ < 0.8)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(B):
        row = []
        while len(row) < T:
            base = torch.randn(D, generator=g, dtype=torch.float64)
            n = int(torch.randint(1, 5, (1,), generator=g))
            row += [base + 0.02 * torch.randn(D, generator=g, dtype=torch.float64) for _ in range(n)]
        rows.append(torch.stack(row[:T]))
    return torch.stack(rows)


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_greedy_merge_is_algorithm_1(seed):
    x = runs_of_near_duplicates(seed=seed)
    starts = merge_starts(x, TAU)
    for b in range(x.shape[0]):
        _, groups = algorithm1(x[b], TAU)
        assert starts[b].nonzero().flatten().tolist() == [grp[0] for grp in groups if len(grp) == 2]
    assert merge_ratio(starts) > 0.1  # the data does merge, runs of 3+ included


def test_padding_never_merges():
    x = runs_of_near_duplicates()
    x[0, :4] = x[0, 4]  # identical (ρ = 1) but padding
    mask = torch.ones(x.shape[:2], dtype=torch.bool)
    mask[0, :4] = False
    starts = merge_starts(x, TAU, mask)
    assert not starts[0, :4].any()
    assert merge_ratio(starts, mask) == float(starts.sum()) / int(mask.sum())


def _attention(seed=0):
    torch.manual_seed(seed)
    return Attention(D, num_heads=4, head_dim=4, num_kv_heads=2).double()


def test_masked_full_length_merge_equals_attention_on_the_stacked_tokens():
    """Eqs. 31–32 at full length (second tokens of pairs masked as padding) vs Algorithm 1's T' tokens."""
    attn, x = _attention(), runs_of_near_duplicates()
    starts = merge_starts(x, TAU)
    merged, keep = merge_tokens(x, starts)
    ours = unmerge(attn(merged, mask=keep)[0], starts)
    for b in range(x.shape[0]):
        compact, groups = algorithm1(x[b], TAU)
        y = attn(compact[None])[0][0]                                   # [T', d]
        ref = torch.empty_like(x[b])
        for k, grp in enumerate(groups):
            ref[list(grp)] = y[k]                                       # eq. 32: copy to every source
        torch.testing.assert_close(ours[b], ref, atol=1e-13, rtol=0)


def _qkv(x, seed=3, H=4, Hkv=2, K=4, V=3):
    g = torch.Generator().manual_seed(seed)
    B, T, _ = x.shape
    wq, wk, wv = (torch.randn(D, n * w, generator=g, dtype=torch.float64) for n, w in ((H, K), (Hkv, K), (Hkv, V)))
    return (x @ wq).view(B, T, H, K), (x @ wk).view(B, T, Hkv, K), (x @ wv).view(B, T, Hkv, V)


def test_causal_variant_attends_over_the_merge_of_its_own_prefix():
    x = runs_of_near_duplicates()
    q, k, v = _qkv(x)
    starts = merge_starts(x, TAU)
    out = causal_merged_attention(q, k, v, starts, scale=0.4)
    B, T, H, _ = q.shape
    rep = H // k.shape[2]
    for b in range(B):
        for t in range(T):
            _, groups = algorithm1(x[b, :t + 1], TAU)           # the plan of the prefix x_{≤t}
            keys = torch.stack([k[b, list(grp)].mean(0) for grp in groups])    # [T'_t, Hkv, K]
            vals = torch.stack([v[b, list(grp)].mean(0) for grp in groups])
            for h in range(H):
                w = torch.softmax(keys[:, h // rep] @ q[b, t, h] * 0.4, dim=0)
                torch.testing.assert_close(out[b, t, h], w @ vals[:, h // rep], atol=1e-13, rtol=0)


def test_threshold_above_one_is_plain_attention():
    x = runs_of_near_duplicates()
    starts = merge_starts(x, 1.01)
    assert not starts.any()
    q, k, v = _qkv(x)
    plain, _ = sdpa_softmax_attention(q, k, v, scale=0.4)
    torch.testing.assert_close(causal_merged_attention(q, k, v, starts, scale=0.4), plain, atol=1e-13, rtol=0)
    merged, keep = merge_tokens(x, starts)
    assert torch.equal(merged, x) and bool(keep.all())


def _first_pair_at(start, B=2, T=14):
    """Unrelated tokens except a near-duplicate pair (start, start + 1) (ρ > 0.99) and a later one."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=g)
    for a in (start, start + 4):
        x[:, a + 1] = x[:, a] + 0.05 * torch.randn(B, D, dtype=torch.float64, generator=g)
    return x


def test_probe_flags_the_written_merge_at_the_first_pair():
    attn = _attention()

    def as_written(kw):
        starts = merge_starts(kw["x"], TAU)
        merged, keep = merge_tokens(kw["x"], starts)
        return unmerge(attn(merged, mask=keep)[0], starts)

    report = check_causality(as_written, {"x": _first_pair_at(4)})
    assert report.first_leak == 4 and report.max_leak > 1e-3


def test_probe_passes_the_causal_merge_bit_for_bit():
    def causal(kw):
        q, k, v = _qkv(kw["x"])
        return causal_merged_attention(q, k, v, merge_starts(kw["x"], TAU), scale=0.4)

    x = _first_pair_at(4)
    assert merge_starts(x, TAU).sum() == 4  # two pairs per row
    report = check_causality(causal, {"x": x})
    assert report.causal and report.max_leak == 0.0
