"""``assocmem probe ...``: every sub-subcommand writes JSON + PNG into --out and prints it."""
import json

import pytest

from assocmem.cli import main


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    path = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def run(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr()


def test_graph_tracing_cli_and_overwrite_guard(llama_dir, tmp_path, capsys):
    out = tmp_path / "gt"
    argv = ["probe", "graph-tracing", str(llama_dir), "--graph", "grid", "ring", "--walks", "2", "--length", "64",
            "--window", "16", "--out", str(out)]
    code, cap = run(argv, capsys)
    assert code == 0 and cap.out.strip().endswith(str(out))
    data = json.loads((out / "graph_tracing.json").read_text())
    assert set(data["graphs"]) == {"grid", "ring"} and data["graphs"]["ring"]["num_nodes"] == 10
    assert {p.name for p in out.glob("*.png")} == {f"graph_tracing_{k}_{f}.png" for k in ("grid", "ring")
                                                   for f in ("pca", "curves")}
    code, cap = run(argv, capsys)
    assert code == 2 and "--overwrite" in cap.err
    code, _ = run(argv[:3] + ["--graph", "ring"] + argv[6:] + ["--overwrite"], capsys)
    assert code == 0
    assert set(json.loads((out / "graph_tracing.json").read_text())["graphs"]) == {"ring"}
    assert len(list(out.glob("*.png"))) == 2  # the old folder was replaced


def test_causality_cli(llama_dir, tmp_path, capsys):
    out = tmp_path / "c"
    code, cap = run(["probe", "causality", "deltanet", "sca", str(llama_dir), "--seq-len", "9", "--ops",
                     "--out", str(out)], capsys)
    assert code == 0
    data = json.loads((out / "causality.json").read_text())
    assert data["all_causal"] is True
    targets = [r["target"] for r in data["reports"]]
    assert "mixer:deltanet:auto" in targets and any(t.startswith("model:") for t in targets)
    assert any(t.endswith(":chunk") for t in targets) and (out / "causality.png").is_file()
    assert "causality [1/3] deltanet ...\n" in cap.err and f"causality [3/3] {llama_dir} done in" in cap.err


def test_capacity_cli(tmp_path, capsys):
    out = tmp_path / "cap"
    code, cap = run(["probe", "capacity", "deltanet", "softmax", "--num-pairs", "1", "4", "--key-dim", "8",
                     "--value-dim", "8", "--trials", "2", "--out", str(out)], capsys)
    assert code == 0
    assert [line.split(") ", 1)[1] for line in cap.err.splitlines() if line.startswith("capacity (")] == [
        "memory 1/2 deltanet ...", "memory 2/2 softmax ..."]  # progress before each memory
    curves = json.loads((out / "capacity.json").read_text())["curves"]
    assert [c["label"] for c in curves] == ["deltanet", "softmax"]
    assert curves[0]["rel_mse"][0] == pytest.approx(0.0, abs=1e-20) and (out / "capacity.png").is_file()


def test_recall_cli(llama_dir, tmp_path, capsys):
    out = tmp_path / "r"
    code, _ = run(["probe", "recall", "--models", str(llama_dir), "--seq-len", "32", "--num-kv-pairs", "2", "4",
                   "--vocab-size", "128", "--examples", "8", "--out", str(out)], capsys)
    assert code == 0
    data = json.loads((out / "recall.json").read_text())
    assert [p["num_kv_pairs"] for p in data["points"]] == [2, 4]
    assert data["points"][0]["state_size"] == 2 * 2 * 1 * 8 * 32  # Llama KV cache at L = 32
    assert (out / "recall_vs_state.png").is_file() and (out / "recall_vs_pairs.png").is_file()


def test_bad_model_reference(tmp_path, capsys):
    code, cap = run(["probe", "graph-tracing", "no-such-model", "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and "model preset" in cap.err
