"""Synthetic tasks: MQAR exactly as Zoology builds it, graph walks, selective copying."""
import numpy as np
import pytest

from assocmem.training.graphs import make_graph
from assocmem.training.tasks import (
    graph_walk_dataset, mqar_arrays, mqar_dataset, power_law_gap_probs, selective_copy_dataset)


@pytest.fixture(scope="module")
def mqar():
    return mqar_arrays(300, 64, 8, vocab_size=8192, seed=1)


def test_mqar_context_keys_and_values(mqar):
    inputs, _ = mqar
    keys, values = inputs[:, 0:16:2], inputs[:, 1:16:2]
    assert keys.min() >= 1 and keys.max() < 4096
    assert values.min() >= 4096 and values.max() < 8192
    assert all(len(set(row)) == 8 for row in keys) and all(len(set(row)) == 8 for row in values)


def test_mqar_labels_exactly_after_reinserted_keys(mqar):
    inputs, labels = mqar
    for x, y in zip(inputs, labels):
        keys, values = x[0:16:2], x[1:16:2]
        query = x[16:]
        positions = 16 + np.flatnonzero(query)                  # re-inserted keys, filler 0 elsewhere
        assert sorted(query[query != 0]) == sorted(keys)          # each key exactly once
        assert np.all((positions - 16) % 2 == 0)                 # offset 2·gap
        expected = np.full(64, -100)
        expected[positions + 1] = [values[list(keys).index(k)] for k in x[positions]]
        np.testing.assert_array_equal(y, expected)               # the value, scored at the key's logits


def test_mqar_is_deterministic_by_seed_and_prefix_stable():
    a = mqar_dataset(40, 32, 4, vocab_size=64, seed=5)
    b = mqar_dataset(40, 32, 4, vocab_size=64, seed=5)
    c = mqar_dataset(40, 32, 4, vocab_size=64, seed=6)
    assert a["input_ids"] == b["input_ids"] and a["labels"] == b["labels"]
    assert a["input_ids"] != c["input_ids"]
    longer = mqar_dataset(2000, 32, 4, vocab_size=64, seed=5)
    assert longer["input_ids"][:40] == a["input_ids"]


def test_mqar_first_gap_follows_the_power_law():
    """The first context pair's gap is Zoology's first draw: P(gap = i-1) ∝ a·i^(a−1)."""
    inputs, _ = mqar_arrays(20000, 32, 4, vocab_size=64, power_a=0.5, seed=0)
    first_key = inputs[:, 0]
    where = np.argmax(inputs[:, 8:] == first_key[:, None], axis=1)  # offset 2·gap in the query region
    freq = np.bincount(where // 2, minlength=12) / len(where)
    np.testing.assert_allclose(freq, power_law_gap_probs(12, 0.5), atol=0.012)


def test_mqar_random_non_queries_replaces_only_filler():
    plain, labels = mqar_arrays(20, 64, 8, vocab_size=128, seed=3)
    noisy, labels2 = mqar_arrays(20, 64, 8, vocab_size=128, seed=3, random_non_queries=True)
    np.testing.assert_array_equal(labels, labels2)
    np.testing.assert_array_equal(noisy[plain != 0], plain[plain != 0])
    assert (noisy[plain == 0] != 0).mean() > 0.9


@pytest.mark.parametrize("kwargs,match", [
    (dict(seq_len=63, num_kv_pairs=4), "even"), (dict(seq_len=64, num_kv_pairs=17), "4·num_kv_pairs"),
    (dict(seq_len=64, num_kv_pairs=4, vocab_size=64), "vocab_size"), (dict(seq_len=64, num_kv_pairs=0), "num_kv_pairs")])
def test_mqar_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mqar_arrays(2, seed=0, **kwargs)


def test_graph_walk_dataset_walks_valid_edges_with_random_tokens():
    ds = graph_walk_dataset(30, 50, vocab_size=100, seed=0)
    graphs = {k: make_graph(k) for k in ("grid", "ring", "hex")}
    assert {row["kind"] for row in ds} == {"grid", "ring", "hex"}
    for row in ds:
        graph, nodes = graphs[row["kind"]], row["nodes"]
        assert all(graph.has_edge(a, b) for a, b in zip(nodes[:-1], nodes[1:]))
        tokens = np.array(row["node_tokens"][: graph.number_of_nodes()])
        assert len(set(tokens)) == len(tokens) and tokens.min() >= 0 and tokens.max() < 100
        np.testing.assert_array_equal(row["input_ids"], tokens[nodes])
        assert row["labels"] == [-100] + row["input_ids"][1:]
    assert ds["node_tokens"][0] != ds["node_tokens"][1]  # a fresh token assignment per sequence


def test_selective_copy_labels_are_the_data_tokens_in_order():
    ds = selective_copy_dataset(20, 41, 8, vocab_size=16, seed=0)
    for row in ds:
        x, y = np.array(row["input_ids"]), np.array(row["labels"])
        context = 41 - 1 - 8
        data = x[:context][x[:context] != 0]
        assert len(data) == 8 and data.min() >= 3
        assert x[context] == 1 and np.all(x[context + 1:] == 2)
        np.testing.assert_array_equal(y[context + 1:], data)
        assert np.all(y[: context + 1] == -100)
