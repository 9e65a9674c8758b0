"""Recall probe: MQAR accuracy (exact on oracle models), state sizes, the training path, figures."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from assocmem.probes.recall import (
    mqar_accuracy, model_state_size, recall_vs_pairs, save_recall_figures, summarize, train_mqar_models,
)
from assocmem.training.tasks import mqar_arrays


class LookupOracle(torch.nn.Module):
    """Causal MQAR oracle: at a repeated token, predict the token that followed its first
    occurrence, but only for keys written among the first ``remember`` pairs."""

    def __init__(self, vocab_size, remember=None):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab_size)
        self.anchor = torch.nn.Parameter(torch.zeros(()))
        self.remember = remember

    def state_size(self, seq_len):
        return 2 * seq_len  # it keeps the whole context

    def forward(self, input_ids):
        B, T = input_ids.shape
        logits = torch.zeros(B, T, self.config.vocab_size)
        for b in range(B):
            seen = {}
            for t in range(T):
                tok = int(input_ids[b, t])
                if tok in seen and tok != 0:
                    logits[b, t, seen[tok]] = 1.0
                elif t + 1 < T and tok != 0 and t % 2 == 0 and (self.remember is None or t < 2 * self.remember):
                    seen.setdefault(tok, None)
                if t >= 1 and int(input_ids[b, t - 1]) in seen and seen[int(input_ids[b, t - 1])] is None:
                    seen[int(input_ids[b, t - 1])] = tok  # the value that follows a key
        return SimpleNamespace(logits=logits)


def test_oracle_accuracy_is_exact():
    kw = dict(seq_len=64, num_kv_pairs=8, vocab_size=128, num_examples=20, seed=5)
    assert mqar_accuracy(LookupOracle(128), **kw) == 1.0
    # remembering only the first 3 pairs: accuracy = 3/8 exactly (every key is queried once)
    assert mqar_accuracy(LookupOracle(128, remember=3), **kw) == pytest.approx(3 / 8, abs=1e-15)
    inputs, labels = mqar_arrays(20, 64, 8, vocab_size=128, seed=5)
    assert (labels != -100).sum() == 20 * 8


def test_state_sizes():
    transformers = pytest.importorskip("transformers")
    from assocmem.models import HybridConfig, build_model

    model = build_model(HybridConfig(d_model=32, vocab_size=64, layers="gdn,attn", head_dim=16, mlp_ratio=0))
    H, K = 2, 16  # d_model 32 / head_dim 16
    gdn = H * K * K + 3 * H * (2 * K + K)  # matrix memory + conv buffer (width 4)
    assert model_state_size(model, seq_len=100) == gdn + 100 * H * (K + K)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2))
    assert model_state_size(llama, seq_len=50) == 2 * 3 * 2 * 8 * 50


def test_train_evaluate_and_plot_end_to_end(tmp_path):
    models = train_mqar_models(["gdn"], [16], out_dir=tmp_path / "runs", seq_len=32, num_kv_pairs=2,
                               vocab_size=64, steps=3, batch_size=8, num_train=64)
    (mixer, model), = models.values()
    assert mixer == "gdn" and (tmp_path / "runs" / "gdn-d16" / "final").is_dir()
    nets = {"gdn-d16": model, "oracle": LookupOracle(64)}
    points = recall_vs_pairs(nets, num_kv_pairs=[2, 4], seq_len=32, vocab_size=64,
                             mixer_of={"gdn-d16": "gdn", "oracle": "oracle"}, num_examples=16)
    acc = {(p.label, p.num_kv_pairs): p.accuracy for p in points}
    assert acc[("oracle", 2)] == acc[("oracle", 4)] == 1.0
    assert 0.0 <= acc[("gdn-d16", 2)] < 0.5  # 3 steps of training: far from solved
    assert summarize(points)["mean_accuracy"]["oracle"] == 1.0
    assert {p.state_size for p in points if p.label == "oracle"} == {64}
    for path in save_recall_figures(points, tmp_path):
        assert path.stat().st_size > 10_000


def test_vocab_mismatch_raises():
    with pytest.raises(ValueError, match="vocab_size"):
        mqar_accuracy(LookupOracle(64), seq_len=32, num_kv_pairs=2, vocab_size=128, num_examples=2)
