"""The GPU benches on CPU at tiny shapes: `bench backends` with FLA's naive references standing in for its
Triton kernels (the injection point of mixers/kernels.py's FlaEnv), `bench models`, `bench smoke`, and the
budgets that cut a slow row off. Structure and checked values; no timing is asserted."""
import json
import time
import types

import pytest
import torch

from assocmem.mixers.external import fla_naive_kernels
from assocmem.mixers.kernels import FlaEnv
from assocmem.training.bench import backends, smoke
from assocmem.training.bench.budget import Budget, BudgetExceeded
from assocmem.cli import main

KERNELS = fla_naive_kernels()
if KERNELS is None:
    pytest.skip("fla-core (FLA's naive references) is not installed", allow_module_level=True)
NAIVE = FlaEnv(fla=True, kernels=KERNELS, device_type="cpu", float64=True)
TINY = backends.Shape(B=1, H=2, K=16, V=16)
pytestmark = pytest.mark.usefixtures("one_thread")


def rows_of(families, env=NAIVE, impls=("fla", "auto", "eager", "transformers", "sdpa"), modes=("fwd", "fwdbwd"),
            **kw):
    return backends.run_backends(families, (32,), modes, shape=TINY, device="cpu", env=env, impls=impls, repeats=1,
                                 log=lambda *_: None, **kw)


def by(rows):
    return {(r["family"], r["mode"], r["impl"]): r for r in rows}


def test_backends_cli_rows_json_and_tables(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", "backends", "--device", "cpu", "--naive-fla", "--families", "gated_deltanet", "mamba2",
                 "--seq-lens", "32", "--batch", "1", "--heads", "2", "--head-dim", "16", "--repeats", "1",
                 "--impls", "fla", "auto", "eager", "transformers", "sdpa", "--json", str(out),
                 "--markdown", str(tmp_path / "b.md")]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["device"] == "cpu" and data["config"]["naive_fla"] and data["config"]["K"] == 16
    rows = by(data["rows"])
    impls = {"fla", "auto", "eager", "transformers", "sdpa"}
    assert set(rows) == {(f, m, i) for f in ("gated_deltanet", "mamba2") for m in ("fwd", "fwdbwd") for i in impls}
    for (family, mode, impl), r in rows.items():
        assert r["status"] == "ok", r
        assert r["ms"] > 0 and r["first_call_s"] > 0 and r["T"] == 32 and r["dtype"] == "bfloat16"
        if impl == "sdpa":  # another function: not checked
            assert r["max_err"] is None
        elif impl == "eager":  # the reference
            assert r["max_err"] == 0.0
        else:  # FLA's naive references (direct and through auto) and transformers' torch path against eager, bf16
            assert 0 < r["max_err"] <= backends.TOL[torch.bfloat16], r
        assert r["vs_fla"] == pytest.approx(r["ms"] / rows[(family, mode, "fla")]["ms"])
    assert "[fla]" in rows[("gated_deltanet", "fwdbwd", "auto")]["what"]  # auto took FLA's (stand-in) kernel
    assert "chunk_gated_delta_rule" in rows[("gated_deltanet", "fwd", "fla")]["what"]
    assert "torch_chunk_gated_delta_rule" in rows[("gated_deltanet", "fwd", "transformers")]["what"]
    assert "mamba2_chunk_scan" in rows[("mamba2", "fwd", "transformers")]["what"]
    table = (tmp_path / "b.md").read_text()
    assert "| gated_deltanet | 32 | fwdbwd |" in table and "(fla) |" in table and "first call" in table
    assert "wrote" in capsys.readouterr().out


def test_every_fla_class_is_checked_against_eager():
    rows = by(rows_of(("deltanet", "gla", "kda", "rwkv7_dplr"), impls=("fla", "auto"), modes=("fwdbwd",)))
    for family in ("deltanet", "gla", "kda", "rwkv7_dplr"):
        for impl in ("fla", "auto"):
            r = rows[(family, "fwdbwd", impl)]
            assert r["status"] == "ok" and 0 < r["max_err"] <= backends.TOL[torch.bfloat16], r


def _perturbed(name, change):
    """FLA's naive namespace with ``name`` replaced by ``change(naive function)``."""
    return FlaEnv(fla=True, kernels=types.SimpleNamespace(**{**vars(KERNELS), name: change(getattr(KERNELS, name))}),
                  device_type="cpu", float64=True)


def test_a_wrong_output_is_reported_and_not_timed():
    def off(fn):
        return lambda *a, **kw: (fn(*a, **kw)[0] * 1.1, None)

    rows = by(rows_of(("gated_deltanet",), env=_perturbed("chunk_gated_delta_rule", off), impls=("fla", "auto")))
    for mode in ("fwd", "fwdbwd"):
        for impl in ("fla", "auto"):  # auto runs the same (wrong) kernel through the adapter
            r = rows[("gated_deltanet", mode, impl)]
            assert r["status"].startswith("wrong: max error") and r["ms"] is None
            assert r["max_err"] == pytest.approx(0.1, rel=0.05)  # 10 % of the largest output entry


def test_a_wrong_gradient_is_reported_in_fwdbwd_only():
    def q_grad_off(fn):  # same values of q, 1.5 times its gradient
        return lambda q, *a, **kw: fn(1.5 * q - (0.5 * q).detach(), *a, **kw)

    rows = by(rows_of(("gated_deltanet",), env=_perturbed("chunk_gated_delta_rule", q_grad_off), impls=("fla",)))
    assert rows[("gated_deltanet", "fwd", "fla")]["status"] == "ok"
    bad = rows[("gated_deltanet", "fwdbwd", "fla")]
    assert bad["status"].startswith("wrong") and bad["max_err"] == pytest.approx(0.5, rel=0.05)


def test_fla_refusal_is_a_row_with_the_reason_and_the_fix():
    hopper = FlaEnv(fla=True, triton=(3, 6, 0), capability=(9, 0), kernels=KERNELS, device_type="cpu", float64=True)
    rows = by(rows_of(("gated_deltanet",), env=hopper, impls=("fla",)))
    assert rows[("gated_deltanet", "fwd", "fla")]["status"] == "ok"  # the forward is not refused
    refused = rows[("gated_deltanet", "fwdbwd", "fla")]
    assert refused["status"].startswith("refused: FLA refuses the backward of chunk_gated_delta_rule on Hopper")
    assert "Triton >= 3.7.1" in refused["status"] and refused["ms"] is None


def test_classes_without_fla_kernels():
    """SCA: no FLA kernel and no transformers path (n/a rows), its prefix sum against SDPA at the same shape."""
    rows = by(rows_of(("sca",), env=None, impls=("fla", "auto", "eager", "transformers", "sdpa")))
    for mode in ("fwd", "fwdbwd"):
        assert rows[("sca", mode, "fla")]["status"].startswith("n/a: FLA has no kernel for family")
        assert rows[("sca", mode, "transformers")]["status"].startswith("n/a")
        assert rows[("sca", mode, "sdpa")]["status"] == "ok"
        auto = rows[("sca", mode, "auto")]  # on CPU without FLA: the eager prefix sum
        assert auto["status"] == "ok" and "[torch]" in auto["what"] and auto["max_err"] == 0.0


def test_budget_cuts_a_slow_row_off():
    def slow(q, k, v, **_):
        while True:  # Python that never returns: the case's timer interrupts it
            time.sleep(0.01)

    impl = backends.Impl("auto", "never returns", slow, {"q": torch.ones(1), "k": torch.ones(1), "v": torch.ones(1)})
    with Budget(60) as budget:
        row = backends.run_row(impl, False, backends.Cotangent(), torch.device("cpu"), None, 0.05, 1, budget, 0.2, {})
    assert row["status"].startswith("skipped: budget") and row["ms"] is None


def test_budget_checks_and_wrapped_cuts():
    with Budget(0) as spent:
        with pytest.raises(BudgetExceeded, match="bench budget"):
            spent.check()
        with pytest.raises(BudgetExceeded):
            with spent.case(10):
                pass
    with Budget(60) as budget:
        with pytest.raises(BudgetExceeded):
            with budget.case(0.05):
                while True:
                    budget.check()
    try:  # torch.compile wraps what its compiler raised: the cut is found behind the wrapper
        try:
            raise BudgetExceeded("case budget")
        except BudgetExceeded as inner:
            raise RuntimeError("InductorError") from inner
    except RuntimeError as outer:
        assert isinstance(backends.budget_cut(outer), BudgetExceeded)
    assert backends.budget_cut(RuntimeError("other")) is None


def test_models_bench_against_llama(tmp_path):
    out = tmp_path / "m.json"
    assert main(["bench", "models", "--device", "cpu", "--presets", "thesis-tiny-gdn-75", "--seq-lens", "16",
                 "--batch", "2", "--warmup", "1", "--steps", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    ours, llama = data["rows"]
    assert (ours["model"], llama["model"]) == ("thesis-tiny-gdn-75", "llama:thesis-tiny-gdn-75")
    for r in (ours, llama):
        assert r["status"] == "ok" and r["tokens_per_s"] > 0 and r["peak_gib"] is None  # no CUDA: n/a
        assert r["T"] == 16 and 0 < r["loss"] < 10
    assert ours["kernels"] == ["chunk [torch]"] and llama["kernels"] is None
    assert ours["vs_llama"] == pytest.approx(ours["tokens_per_s"] / llama["tokens_per_s"])
    assert 0.8 < ours["params_m"] / llama["params_m"] < 1.25  # the same size


def test_smoke_lists_every_preset_and_hybrid():
    from assocmem.mixers.presets import list_presets
    from assocmem.models.presets import list_model_presets

    names = set(smoke.configurations(tiny=False))
    assert set(list_model_presets()) <= names and set(smoke.HYBRIDS) <= names
    assert {f"{p},attn" for p in list_presets()} <= names
    tiny = smoke.configurations(tiny=True)
    assert "nautile-tiny" in tiny and "nautile-370m" not in tiny and tiny["kda,attn"].d_model == 32


def test_smoke_trains_and_exits_1_on_a_failure(tmp_path, capsys, monkeypatch):
    out = tmp_path / "s.json"
    args = ["bench", "smoke", "--device", "cpu", "--tiny", "--presets", "thesis-tiny-gdn-75", "st1-tiny",
            "--layers", "kda,attn", "--seq-len", "16", "--json", str(out)]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["config"] for r in rows] == ["thesis-tiny-gdn-75", "st1-tiny", "kda,attn"]
    assert all(r["status"] == "ok" and r["loss"] > 0 for r in rows)
    assert rows[1]["T"] == 128  # st1-tiny's circular filters are built for 128 tokens
    assert rows[2]["kernels"] == ["chunk [torch]"]
    assert "3 of 3 configurations train a step" in capsys.readouterr().out

    real = smoke.train_step

    def failing(hc, **kw):
        if hc.layers == "kda,attn":
            raise TypeError("q, k, v must share one dtype")
        return real(hc, **kw)

    monkeypatch.setattr(smoke, "train_step", failing)
    assert main([*args, "--overwrite"]) == 1
    text = capsys.readouterr().out
    assert "kda,attn" in text and "error: TypeError: q, k, v must share one dtype" in text
    assert "failed: kda,attn" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
@pytest.mark.parametrize("argv", [["mixers", "--device", "cuda"], ["train", "--device", "cuda"],
                                  ["backends"], ["models"], ["smoke"]])
def test_cuda_is_refused_without_a_gpu(argv, capsys):
    assert main(["bench", *argv]) == 2
    assert "--device cuda needs a CUDA build of torch" in capsys.readouterr().err


def test_the_command_line_lists_the_benches_choices_as_the_library_does():
    """cli/bench.py keeps the GPU benches' choices as literals (its parsers import no torch)."""
    from assocmem.cli import bench as cli_bench
    from assocmem.mixers.kernels import BACKENDS
    from assocmem.training.bench import lm

    assert cli_bench.BACKEND_FAMILIES == backends.FAMILIES
    assert cli_bench.BACKEND_COLUMNS == backends.COLUMNS
    assert cli_bench.BACKEND_DTYPES == tuple(backends.DTYPES)
    assert cli_bench.MODEL_PRESETS == lm.DEFAULT_PRESETS
    assert cli_bench.BACKENDS == tuple(BACKENDS)
