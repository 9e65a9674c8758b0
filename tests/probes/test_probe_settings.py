"""Probes read the model's own settings: a run folder's data (length, vocabulary) is the default,
a different value is refused unless asked for, and inputs longer than the model's positions are a
clear error, not an IndexError."""
import json

import pytest
import torch
import yaml

from assocmem.models import HybridConfig, build_model
from assocmem.probes.graph_tracing import trace_graph
from assocmem.probes.io import position_limit, run_data
from assocmem.probes.recall import mqar_accuracy
from assocmem.cli import main as cli_main
from assocmem.training.config import load_config
from assocmem.training.graphs import make_graph
from assocmem.training.loop import train

HYBRID = {"d_model": 16, "layers": "gdn", "num_heads": 2, "mlp_ratio": 0}


def _run(tmp_path, name, data):
    cfg = {"name": name, "output_dir": str(tmp_path / "runs"), "seed": 0, "model": {"hybrid": HYBRID},
           "data": data, "optim": {"lr": 3e-3, "warmup_steps": 1},
           "train": {"steps": 2, "batch_size": 4, "progress": False, "threads": 1, "checkpoint_every": 1,
                     "keep_last": 3}}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    train(load_config(tmp_path / f"{name}.yaml"))
    return tmp_path / "runs" / name


@pytest.fixture(scope="module")
def mqar_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("settings")
    return _run(tmp_path, "mq", {"kind": "mqar", "seq_len": 24, "num_kv_pairs": 2, "vocab_size": 48,
                                 "num_train": 16, "num_eval": 4})


def test_a_model_folder_knows_its_run(mqar_run):
    for ref in (mqar_run, mqar_run / "final", mqar_run / "checkpoints" / "step_00000001"):
        data = run_data(str(ref))
        assert (data.kind, data.seq_len, data.vocab_size) == ("mqar", 24, 48)
    assert run_data("gated_deltanet") is None


def test_recall_defaults_to_the_runs_data_and_refuses_other_settings(mqar_run, tmp_path, capsys):
    common = ["probe", "recall", "--models", str(mqar_run / "final"), "--num-kv-pairs", "2", "--examples", "4"]
    assert cli_main([*common, "--out", str(tmp_path / "a")]) == 0
    report = json.loads((tmp_path / "a" / "recall.json").read_text())
    assert (report["seq_len"], report["vocab_size"]) == (24, 48)  # not the flags' defaults 64 / 256
    capsys.readouterr()
    assert cli_main([*common, "--seq-len", "64", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert f"--seq-len 64 differs from data.seq_len=24 that {mqar_run / 'final'} was trained with" in err
    assert not (tmp_path / "b").exists()  # refused before anything is written
    assert cli_main([*common, "--vocab-size", "40", "--out", str(tmp_path / "c")]) == 2
    assert "--vocab-size 40 differs from data.vocab_size=48" in capsys.readouterr().err
    assert cli_main([*common, "--seq-len", "32", "--allow-other-settings", "--out", str(tmp_path / "d")]) == 0
    assert json.loads((tmp_path / "d" / "recall.json").read_text())["seq_len"] == 32


def test_runs_trained_differently_are_probed_separately(mqar_run, tmp_path, capsys):
    other = _run(tmp_path, "mq2", {"kind": "mqar", "seq_len": 32, "num_kv_pairs": 2, "vocab_size": 48,
                                   "num_train": 16, "num_eval": 4})
    assert cli_main(["probe", "recall", "--models", str(mqar_run), str(other), "--out", str(tmp_path / "o")]) == 2
    assert "were trained with different data.seq_len [24, 32]: probe them in separate calls" in capsys.readouterr().err


def test_graph_tracing_walks_a_graph_walk_run_at_its_length(tmp_path):
    run = _run(tmp_path, "gw", {"kind": "graph_walk", "seq_len": 40, "vocab_size": 32, "num_train": 8, "num_eval": 2})
    assert cli_main(["probe", "graph-tracing", str(run), "--walks", "2", "--out", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "graph_tracing.json").read_text())
    assert max(report["graphs"]["grid"]["context_lengths"]) == 40


def _gpt2(n_positions=32):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=n_positions, n_embd=16, n_layer=1, n_head=2)).eval()


@pytest.mark.parametrize("kind", ["gpt2", "learned"])
def test_walks_longer_than_the_models_positions_are_a_clear_error(kind, tmp_path, capsys):
    model = _gpt2() if kind == "gpt2" else build_model(HybridConfig(
        d_model=16, layers="gdn", mlp_ratio=0, vocab_size=64, position_embedding="learned", max_positions=32)).eval()
    assert position_limit(model) == 32
    with pytest.raises(IndexError):  # what the model's own table does beyond its 32 rows (spared the user)
        (model.transformer.wpe if kind == "gpt2" else model.model.embed_positions)(torch.tensor([40]))
    with pytest.raises(ValueError, match="walk_length 40 is longer than the model's 32 positions"):
        trace_graph(model, make_graph("ring"), num_walks=2, walk_length=40)
    with pytest.raises(ValueError, match="seq_len 40 is longer than the model's 32 positions"):
        mqar_accuracy(model, seq_len=40, num_kv_pairs=2, vocab_size=64, num_examples=2)
    model.save_pretrained(tmp_path / "m")
    assert cli_main(["probe", "graph-tracing", str(tmp_path / "m"), "--length", "40", "--out", str(tmp_path / "o")]) == 2
    assert "--length 40 is longer than the model's 32 positions" in capsys.readouterr().err
    result = trace_graph(model, make_graph("ring"), num_walks=2, walk_length=32)  # at the limit it runs
    assert max(result.context_lengths) == 32


def test_graph_tracing_on_a_run_of_another_task_walks_at_its_trained_length(mqar_run, tmp_path, capsys):
    """A run trained at L = 24 on MQAR: graph tracing walks 24 tokens (not 1200), refuses a longer --length
    naming the limit unless --allow-other-settings, and prints progress lines from the start."""
    assert cli_main(["probe", "graph-tracing", str(mqar_run), "--walks", "2", "--batch-size", "1",
                     "--out", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "graph_tracing.json").read_text())
    assert report["walk_length"] == 24 and max(report["graphs"]["grid"]["context_lengths"]) == 24
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("graph-tracing (") and "reading the run and loading the model" in err[0]
    assert any("graph 1/1 grid: walks 2–2 of 2 (24 tokens each" in line for line in err)
    assert cli_main(["probe", "graph-tracing", str(mqar_run), "--length", "100", "--out", str(tmp_path / "p")]) == 2
    assert (f"--length 100 is beyond the 24 tokens {mqar_run} was trained on (data.seq_len); use --length 24 or "
            f"less, or pass --allow-other-settings") in capsys.readouterr().err
    assert cli_main(["probe", "graph-tracing", str(mqar_run), "--length", "30", "--walks", "1", "--allow-other-settings",
                     "--out", str(tmp_path / "q")]) == 0
    assert json.loads((tmp_path / "q" / "graph_tracing.json").read_text())["walk_length"] == 30


def test_recall_default_k_adapts_to_the_runs_length(mqar_run, tmp_path, capsys):
    """L = 24 holds K ≤ 6 (4·K ≤ L): the default K values are 2 and 4 (8 and 16 do not fit), not a refusal;
    a given K that does not fit is refused up front with the largest that does."""
    from assocmem.probes.recall import default_num_kv_pairs

    assert default_num_kv_pairs(24, 48) == [2, 4] and default_num_kv_pairs(24, 48, (6,)) == [2, 4, 6]
    assert default_num_kv_pairs(4, 48) == [1] and default_num_kv_pairs(64, 256) == [2, 4, 8, 16]
    assert cli_main(["probe", "recall", "--models", str(mqar_run / "final"), "--examples", "4",
                     "--out", str(tmp_path / "a")]) == 0
    report = json.loads((tmp_path / "a" / "recall.json").read_text())
    assert sorted({p["num_kv_pairs"] for p in report["points"]}) == [2, 4]
    capsys.readouterr()
    assert cli_main(["probe", "recall", "--models", str(mqar_run / "final"), "--num-kv-pairs", "8",
                     "--out", str(tmp_path / "b")]) == 2
    assert "--num-kv-pairs 8 does not fit seq_len 24 / vocab_size 48 (4·K <= seq_len, K < vocab_size/2): use K <= 6" \
        in capsys.readouterr().err
