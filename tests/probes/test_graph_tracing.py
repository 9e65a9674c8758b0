"""In-context graph-tracing probe: exact values on an oracle model, end to end on a tiny Llama."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from assocmem.probes.energy import adjacency, dirichlet_energy, neighbour_mixing_control, procrustes_r2
from assocmem.probes.graph_tracing import make_walks, save_graph_tracing_figures, trace_graph
from assocmem.training.graphs import make_graph


class OracleLM(torch.nn.Module):
    """Layer 0 = the node's 2-D position, layer 1 = one-hot node id; the next-token
    distribution is uniform over the current node's neighbours plus every non-graph token."""

    def __init__(self, graph, tokens, vocab_size):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab_size)
        self.anchor = torch.nn.Parameter(torch.zeros(()))
        n = graph.number_of_nodes()
        self.node_of = torch.full((vocab_size,), -1, dtype=torch.long)
        self.node_of[torch.tensor(tokens)] = torch.arange(n)
        self.pos = torch.tensor([graph.nodes[i]["pos"] for i in range(n)], dtype=torch.float64)
        A = torch.as_tensor(adjacency(graph))
        self.graph_logits = torch.full((n, vocab_size), 0.0, dtype=torch.float64)
        self.graph_logits[:, torch.tensor(tokens)] = torch.where(A > 0, 0.0, -torch.inf).double()

    def forward(self, input_ids, output_hidden_states):
        nodes = self.node_of[input_ids]  # (B, T)
        onehot = torch.nn.functional.one_hot(nodes, len(self.pos)).double()
        return SimpleNamespace(logits=self.graph_logits[nodes], hidden_states=(self.pos[nodes], onehot))


def test_oracle_model_exact_values():
    graph, vocab = make_graph("grid"), 50
    tokens = list(range(30, 46))
    model = OracleLM(graph, tokens, vocab)
    res = trace_graph(model, graph, node_tokens=tokens, num_walks=16, walk_length=120, window=40,
                      context_lengths=[40, 80, 120], pca_contexts=[120], seed=7)
    A = adjacency(graph)
    P = model.pos.numpy()
    # class means of constant per-node vectors are the vectors themselves
    np.testing.assert_allclose(res.energy[0], dirichlet_energy(P, A), rtol=0, atol=1e-15)
    np.testing.assert_allclose(res.energy[1], dirichlet_energy(np.eye(16), A), rtol=0, atol=1e-15)
    assert procrustes_r2(res.pca[(0, 120)], P) == pytest.approx(1.0, abs=1e-12)
    # restricted softmax puts all mass on neighbours; full vocab shares it with 34 other tokens
    np.testing.assert_allclose(res.accuracy, 1.0, rtol=0, atol=1e-15)
    walks = make_walks(graph, 16, 120, seed=7)
    deg = A.sum(1)[walks]
    full = deg / (deg + vocab - 16)
    expected = [full[:, c - 40:c].mean() for c in (40, 80, 120)]
    np.testing.assert_allclose(res.accuracy_full, expected, rtol=0, atol=1e-14)
    assert res.chance == pytest.approx(deg.mean() / 16, abs=1e-15)
    assert res.nodes_present == [16, 16, 16]  # walk b starts at node b: every node is seen


def test_the_energy_definition_is_chosen_and_recorded():
    """park and normalised curves are different numbers of the same class means; the ratio is the same."""
    graph, tokens = make_graph("grid"), list(range(30, 46))
    model, A = OracleLM(graph, tokens, 50), adjacency(graph)
    P = model.pos.numpy()
    runs = {e: trace_graph(model, graph, node_tokens=tokens, num_walks=16, walk_length=60, window=40,
                           context_lengths=[40, 60], pca_contexts=[60], seed=7, energy=e) for e in ("park", "normalised")}
    for energy, res in runs.items():
        np.testing.assert_allclose(res.energy[0], dirichlet_energy(P, A, energy), rtol=1e-15, atol=0)
        assert res.to_json()["energy_definition"] == energy
        assert res.control["mixed_energy"] == dirichlet_energy(neighbour_mixing_control(A, 16, seed=7), A, energy)
    assert runs["park"].energy[0, 0] == 48.0 and runs["normalised"].energy[0, 0] == pytest.approx(48 / 448, rel=1e-15)
    np.testing.assert_array_equal(runs["park"].energy_ratio, runs["normalised"].energy_ratio)
    with pytest.raises(ValueError, match="energy: got 'raw'"):
        trace_graph(model, graph, node_tokens=tokens, num_walks=1, walk_length=60, energy="raw")


def tiny_llama(vocab_size=64, layers=2):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("kind", ["grid", "ring", "hex"])
def test_tiny_llama_end_to_end(kind, tmp_path):
    graph = make_graph(kind)
    model = tiny_llama()
    res = trace_graph(model, graph, num_walks=4, walk_length=96, window=24, pca_contexts=[48, 96], seed=1)
    n = graph.number_of_nodes()
    assert res.energy.shape == (3, len(res.context_lengths))
    assert len(set(res.node_tokens)) == n
    # recompute one energy and one accuracy value by hand from the model's outputs
    walks = make_walks(graph, 4, 96, seed=1)
    ids = torch.tensor(res.node_tokens)[torch.as_tensor(walks)]
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    c, W, A = res.context_lengths[-1], 24, adjacency(graph)
    h = out.hidden_states[2][:, c - W:c].double().reshape(-1, 32).numpy()
    nodes = walks[:, c - W:c].reshape(-1)
    present = np.unique(nodes)
    X = np.stack([h[nodes == i].mean(0) for i in present])
    assert res.energy[2, -1] == pytest.approx(dirichlet_energy(X, A[np.ix_(present, present)]), abs=1e-12)
    p = torch.softmax(out.logits.double()[..., res.node_tokens], -1).numpy()  # (B, T, N)
    mass = (p * A[walks]).sum(-1)[:, c - W:c].mean()
    assert res.accuracy[-1] == pytest.approx(mass, abs=1e-12)
    assert np.all(res.accuracy_full <= res.accuracy + 1e-12)
    paths = save_graph_tracing_figures(res, graph, tmp_path)
    assert all(p.stat().st_size > 10_000 for p in paths)
    json.dumps(res.to_json())
