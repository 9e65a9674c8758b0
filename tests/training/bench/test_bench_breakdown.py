"""`assocmem bench breakdown`: op kinds, product FLOPs from shapes, the report's structure (no timing assertions)."""
import json
import math

import pytest
import torch

from assocmem.training.bench.breakdown import (GENERATED, KINDS, REST, breakdown, format_breakdown, is_generated_kernel,
                                               kind_of, product_flops, profile_kinds)


def test_product_flops_from_recorded_shapes():
    assert product_flops("aten::bmm", [[4, 32, 64], [4, 64, 48]]) == 2 * 4 * 32 * 64 * 48
    assert product_flops("aten::baddbmm_", [[4, 32, 48], [4, 32, 64], [4, 64, 48], [], []]) == 2 * 4 * 32 * 64 * 48
    assert product_flops("aten::mm", [[32, 64], [64, 16]]) == 2 * 32 * 64 * 16
    assert product_flops("aten::addmm", [[16], [32, 64], [64, 16], [], []]) == 2 * 32 * 64 * 16
    assert product_flops("aten::bmm", []) == 0.0  # shapes not recorded


def test_kind_of_separates_the_per_chunk_carry_from_batched_products():
    assert kind_of("aten::baddbmm_", [[4, 32, 64], [4, 32, 64], [4, 64, 64], [], []], BH=4) == "matmul, per-chunk"
    assert kind_of("aten::bmm", [[256, 32, 64], [256, 64, 32]], BH=4) == "matmul, batched"
    assert kind_of("aten::mm", [[32, 64], [64, 16]], BH=4) == "matmul, batched"
    assert kind_of("aten::linalg_solve_triangular", [], BH=4) == "triangular solve"
    assert kind_of("aten::clone", [], BH=4) == "copies"
    assert kind_of("aten::exp", [], BH=4) == "elementwise"
    assert kind_of("aten::select", [], BH=4) == REST
    assert kind_of("aten::_scaled_dot_product_flash_attention_for_cpu", [], BH=4) == "fused attention (sdpa)"


def test_generated_kernels_are_told_apart_by_their_names():
    """inductor's kernel events (cpp.enable_kernel_profile on CPU, Triton kernels on GPU) are one kind."""
    for name in ("graph_3_cpp_fused__to_copy_add_exp_mul_sub_tril_0", "cpp_fused_mul_0", "triton_poi_fused_mul_0",
                 "graph_0_triton_red_fused_sum_1"):
        assert is_generated_kernel(name) and kind_of(name, [], BH=4) == GENERATED
    for name in ("aten::exp", "Torch-Compiled Region: 0/0", "## Call CompiledFxGraph abc", "CompiledFunction"):
        assert not is_generated_kernel(name)


def test_profile_kinds_counts_ops_and_flops_per_kind():
    a, b = torch.randn(4, 8, 16), torch.randn(4, 16, 8)
    x, y = torch.randn(32, 8, 16), torch.randn(32, 16, 8)

    def call():
        torch.bmm(a, b)
        torch.bmm(x, y)
        torch.bmm(x, y)
        x.clone().exp_()
        x.view(-1)

    us, count, flops, kernels = profile_kinds(call, calls=2, BH=4)  # per call
    assert count["matmul, per-chunk"] == 1 and count["matmul, batched"] == 2
    assert flops["matmul, per-chunk"] == 2 * 4 * 8 * 16 * 8
    assert flops["matmul, batched"] == 2 * (2 * 32 * 8 * 16 * 8)
    assert count["elementwise"] == 1 and count["copies"] >= 1 and count[REST] >= 1
    assert all(t >= 0 for t in us.values())
    assert count[GENERATED] == 0 and kernels == {}  # nothing compiled


def test_gated_deltanet_breakdown_counts_the_carry_products():
    """The no-grad GDN chunk form runs three [C, K] x [K, V] products per chunk in its carry
    (u = U − W S, the read q S, the write kᵀ u): their FLOPs, read off the profiled shapes, are exact."""
    B, H, K, V, T = 1, 4, 64, 64, 256
    r = breakdown("gdn", T=T, B=B, H=H, K=K, V=V, repeats=1, profiled_calls=1, peak=100.0)
    json.dumps(r)
    assert r["family"] == "gated_deltanet" and r["form"] == "chunk" and r["chunk_size"] == 32
    kinds = {k["kind"]: k for k in r["kinds"]}
    assert tuple(kinds) == KINDS
    C, N = r["chunk_size"], T // r["chunk_size"]
    carry = kinds["matmul, per-chunk"]
    assert carry["calls"] == 3 * N
    assert carry["gflops"] is not None and carry["gflops"] > 0
    assert r["product_gflop"] * 1e9 > 3 * N * 2 * B * H * C * K * V
    assert math.isclose(sum(k["share"] for k in kinds.values()), 1.0, rel_tol=1e-9)
    assert math.isclose(sum(k["ms"] for k in kinds.values()), r["ms"], rel_tol=1e-9)
    assert 0 < r["share_of_peak"] <= r["share_if_only_products"]
    text = "\n".join(format_breakdown(r))
    assert "matmul, per-chunk" in text and "if every op but the products took no time" in text


def test_breakdown_refuses_a_chunk_size_for_forms_without_chunks_and_a_compiled_variant_that_does_not_exist():
    with pytest.raises(ValueError, match="chunk forms; the 'sdpa' form"):
        breakdown("softmax", T=16, chunk_size=8, repeats=1, profiled_calls=1, peak=1.0)
    with pytest.raises(ValueError, match=r"\(compile=True\) needs a form with a compiled variant"):
        breakdown("softmax", T=16, repeats=1, profiled_calls=1, peak=1.0, compiled=True)


def _check_compiled(r: dict) -> dict:
    """The report of a compiled form: its generated kernels are a kind and listed by name, longest first."""
    kinds = {k["kind"]: k for k in r["kinds"]}
    assert r["compiled"] and r["first_call_s"] > 0
    assert kinds[GENERATED]["calls"] >= 1 and kinds[GENERATED]["share"] > 0
    assert r["kernels"] and all(is_generated_kernel(k["name"]) for k in r["kernels"])
    assert [k["share"] for k in r["kernels"]] == sorted((k["share"] for k in r["kernels"]), reverse=True)
    assert sum(k["share"] for k in r["kernels"]) <= kinds[GENERATED]["share"] * (1 + 1e-9)
    assert math.isclose(sum(k["share"] for k in kinds.values()), 1.0, rel_tol=1e-9)
    text = "\n".join(format_breakdown(r))
    assert "(compiled)" in text and "longest generated kernels" in text and r["kernels"][0]["name"] in text
    return kinds


@pytest.fixture
def fresh_dynamo():
    """Graphs compiled earlier in this process (other tests) carry no kernel events: start from none."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_a_compiled_chunk_form_is_broken_down_by_its_generated_kernels(fresh_dynamo):
    r = breakdown("mamba2", T=64, K=16, V=16, repeats=1, profiled_calls=1, peak=1.0, compiled=True)
    assert r["form"] == "chunk" and r["chunk_size"] == 16
    kinds = _check_compiled(r)
    assert kinds["matmul, batched"]["calls"] >= 1  # the products stay aten's (extern kernels of the graph)


def test_the_scan_form_is_always_compiled_and_profiled_by_kernel(fresh_dynamo):
    r = breakdown("ttt_linear", T=16, K=8, V=8, repeats=1, profiled_calls=1, peak=1.0)
    assert r["form"] == "scan"
    _check_compiled(r)


def test_sdpa_time_is_the_fused_attention_kernel():
    r = breakdown("softmax", T=256, repeats=1, profiled_calls=1, peak=1.0)
    kinds = {k["kind"]: k for k in r["kinds"]}
    assert r["form"] == "sdpa" and kinds["fused attention (sdpa)"]["calls"] >= 1
    assert "fused attention (sdpa)" in "\n".join(format_breakdown(r))
