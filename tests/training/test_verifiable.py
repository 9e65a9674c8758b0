"""Verifiable tasks: layouts, determinism, checkers that accept every reference and reject corruptions."""
import random

import networkx as nx
import numpy as np
import pytest

from assocmem.training.data import ByteTokenizer
from assocmem.training.prompt_response import prompt_response_arrays
from assocmem.training.verifiable import (ChainSum, GraphPath, Modular, TextAnswers, extract_hash_answers, get_task,
                                          normalize_number, problems_dataset, score_response, select_answer)
from assocmem.training.verifiable.chain_sum import ANS, EOS, PAD, SEP

RULES = ("first", "last", "strict")


# ---------------------------------------------------------------- chain_sum
def test_chain_sum_layout():
    task = ChainSum(num_digits=5)
    for p in task.problems(50, seed=3):
        digits = list(p.prompt[:-1])
        running = [sum(digits[: i + 1]) % 10 for i in range(5)]
        assert p.prompt[-1] == SEP and all(0 <= d <= 9 for d in digits)
        assert p.reference == (*running, ANS, sum(digits) % 10, EOS)
    assert task.vocab_size == 14 and task.max_new_tokens == 8 and task.row_length == 14


def test_chain_sum_checker_accepts_references_and_rejects_corruptions():
    task = ChainSum(num_digits=6)
    for p in task.problems(200, seed=0):
        answer = p.info["answer"]
        wrong = (answer + 1) % 10
        scratch = p.reference[:6]
        for rule in RULES:
            assert score_response(task, p, p.reference, rule) == (answer, True)
            assert score_response(task, p, (*scratch, ANS, wrong, EOS), rule) == (wrong, False)
            assert score_response(task, p, (*scratch, EOS, ANS, answer), rule) == (None, False)    # after EOS
            assert score_response(task, p, (*scratch, answer, EOS), rule) == (None, False)         # no marker
            assert score_response(task, p, (*scratch, ANS, answer, answer, EOS), rule) == (None, False)  # two digits
            assert score_response(task, p, (*scratch, ANS, SEP, EOS), rule)[1] is False
        two = (*scratch, ANS, answer, ANS, wrong, EOS)
        assert score_response(task, p, two, "first") == (answer, True)
        assert score_response(task, p, two, "last") == (wrong, False)
        assert score_response(task, p, two, "strict") == (None, False)        # two candidate answers: wrong
        same = (*scratch, ANS, answer, ANS, answer, EOS)
        assert score_response(task, p, same, "strict") == (answer, True)       # the same answer twice is one
        assert score_response(task, p, (*scratch, ANS, answer), "first") == (answer, True)   # no EOS: cut by length


def test_problems_are_deterministic_by_seed_and_prefix_stable():
    for task in (ChainSum(num_digits=4), GraphPath(num_nodes=6, extra_edges=2), Modular(p=7)):
        a, b, c = task.problems(20, seed=5), task.problems(20, seed=5), task.problems(20, seed=6)
        assert a == b and a != c and task.problems(7, seed=5) == a[:7]


def test_training_rows_supervise_the_reference_only():
    task = ChainSum(num_digits=3)
    problems = task.problems(4, seed=1)
    ds = problems_dataset(task, problems)
    for row, p in zip(ds, problems):
        n = len(p.prompt)
        assert row["input_ids"] == [*p.prompt, *p.reference]
        assert row["labels"] == [-100] * n + list(p.reference)


# ---------------------------------------------------------------- graph_path
def _graph(p):
    g = nx.Graph()
    g.add_edges_from(map(tuple, p.info["edges"]))
    return g


def test_graph_path_problems_against_networkx():
    task = GraphPath(num_nodes=9, extra_edges=3, node_vocab=20, min_hops=2)
    for p in task.problems(100, seed=2):
        g = _graph(p)
        s, t = p.info["source"], p.info["target"]
        assert g.number_of_nodes() == 9 and g.number_of_edges() == 8 + 3 and nx.is_connected(g)
        assert all(0 <= node < 20 for node in g.nodes)
        path = list(p.reference[:-1])
        assert p.reference[-1] == task.eos_id
        assert len(path) - 1 == nx.shortest_path_length(g, s, t) >= 2       # a shortest path, min_hops apart
        edges_in_prompt = [tuple(p.prompt[i:i + 2]) for i in range(0, 3 * 11, 3)]
        assert {frozenset(e) for e in edges_in_prompt} == {frozenset(e) for e in g.edges}
        assert all(p.prompt[i + 2] == task.sep_id for i in range(0, 33, 3))
        assert p.prompt[33:] == (task.query_id, s, t, task.ans_id)
        assert len(p.prompt) + len(p.reference) <= task.row_length


def test_graph_path_checker_accepts_every_simple_path_and_rejects_corruptions():
    task = GraphPath(num_nodes=7, extra_edges=4, node_vocab=16)
    eos = task.eos_id
    for p in task.problems(60, seed=4):
        g = _graph(p)
        s, t = p.info["source"], p.info["target"]
        for path in nx.all_simple_paths(g, s, t):
            assert score_response(task, p, (*path, eos), "strict") == (tuple(path), True)
        ref = list(p.reference[:-1])
        non_edge = next((a, b) for a in g.nodes for b in g.nodes if a != b and not g.has_edge(a, b))
        corruptions = [ref[:-1], ref[1:], [s, t] if not g.has_edge(s, t) else [s, non_edge[0], t],
                       ref + [ref[-2], ref[-1]], [s, *ref[1:-1], ref[-2], t]]
        for bad in corruptions:
            assert not score_response(task, p, (*bad, eos), "first")[1], (ref, bad)
        assert score_response(task, p, (task.sep_id, eos), "first") == (None, False)
        two = (*ref, task.ans_id, *ref[:-1], eos)
        assert score_response(task, p, two, "first")[1] and not score_response(task, p, two, "strict")[1]


def test_graph_path_refuses_impossible_settings():
    with pytest.raises(ValueError, match="node_vocab=4 < num_nodes=5"):
        GraphPath(num_nodes=5, node_vocab=4)
    with pytest.raises(ValueError, match="at most 10 edges"):
        GraphPath(num_nodes=5, extra_edges=7)
    with pytest.raises(ValueError, match="no graph .* 2 hops apart"):
        GraphPath(num_nodes=4, extra_edges=3, min_hops=2).problems(1, seed=0)   # always complete


# ---------------------------------------------------------------- modular
def test_modular_split_is_nandas():
    """Nanda et al.'s gen_train_test: pairs (i, j, p) row-major, random.seed(seed); random.shuffle;
    the first int(frac · p²) train (3830 / 8939 at p = 113, frac 0.3)."""
    task = Modular(p=113, op="add", train_fraction=0.3)
    train, test = task.split(0)
    pairs = [(i, j, 113) for i in range(113) for j in range(113)]
    random.seed(0)
    random.shuffle(pairs)
    assert (len(train), len(test)) == (3830, 8939)
    assert [p.prompt for p in train] == pairs[:3830] and [p.prompt for p in test] == pairs[3830:]
    assert all(p.reference == ((p.prompt[0] + p.prompt[1]) % 113,) for p in train + test)


@pytest.mark.parametrize("op,fn", [("add", lambda a, b: a + b), ("subtract", lambda a, b: a - b),
                                   ("multiply", lambda a, b: a * b), ("x2xyy2", lambda a, b: a * a + a * b + b * b)])
def test_modular_operations_and_checker(op, fn):
    task = Modular(p=11, op=op)
    train, test = task.split(1)
    for p in train + test:
        a, b, eq = p.prompt
        c = fn(a, b) % 11
        assert eq == 11 and p.reference == (c,)
        assert score_response(task, p, (c,), "strict") == (c, True)
        assert score_response(task, p, ((c + 1) % 11,), "strict") == ((c + 1) % 11, False)
        assert score_response(task, p, (11,), "first") == (None, False)          # "=" is no answer
    ds = problems_dataset(task, train[:3])
    assert ds[0]["labels"] == [-100, -100, -100, train[0].reference[0]] and task.vocab_size == 12


def test_registry():
    assert get_task("chain_sum", num_digits=3) == ChainSum(num_digits=3)
    with pytest.raises(ValueError, match=r"tasks with a checker: \['chain_sum', 'graph_path', 'modular', 'needle'\]"):
        get_task("mqar")
    with pytest.raises(ValueError, match=r"num_digit: Extra inputs .* \(parameters of chain_sum: \['num_digits'\]\)"):
        get_task("chain_sum", num_digit=3)


# ---------------------------------------------------------------- rules, text answers, rows
def test_scoring_rules():
    assert [select_answer(["1", "2", "1"], r) for r in RULES] == ["1", "1", None]
    assert [select_answer([], r) for r in RULES] == [None, None, None]
    with pytest.raises(ValueError, match="first, last, strict|'first', 'last', 'strict'"):
        select_answer(["1"], "majority")


def test_hash_answers_extraction_and_normalisation():
    assert extract_hash_answers("so 3 + 4 = 7\n#### 7") == ["7"]
    assert extract_hash_answers("#### $1,000.\n#### 1000.00 and #### -2.50") == ["1000", "1000", "-2.5"]
    assert extract_hash_answers("the answer is 7") == [] and extract_hash_answers("#### seven") == []
    assert normalize_number("1e3") == "1000" and normalize_number("abc") is None


def test_text_answers_from_a_local_gsm8k_style_file(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text('{"question": "2+2?", "answer": "2+2=4\\n#### 4"}\n'
                    '{"question": "Half of 9?", "answer": "9/2 = 4.5\\n#### 4.50"}\n')
    tok = ByteTokenizer()
    problems = TextAnswers(path, tokenizer=tok, prompt_template="Q: {prompt}\nA:").problems()
    task = TextAnswers(path, tokenizer=tok)
    assert [p.info["answer"] for p in problems] == ["4", "4.5"]
    assert bytes(problems[0].prompt).decode() == "Q: 2+2?\nA:"
    first = task.problems(1)[0]
    assert score_response(task, first, first.reference, "strict") == ("4", True)
    assert score_response(task, first, tok.encode("#### 4.0") + [256, *tok.encode("#### 5")], "strict") == ("4", True)
    assert score_response(task, first, tok.encode("#### 4 or #### 5"), "strict") == (None, False)
    assert score_response(task, first, tok.encode("#### 4 or #### 5"), "first") == ("4", True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no final line"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl record 0 \(0-based\), field 'answer': the reference must state one answer the 'gsm8k' extractor"):
        TextAnswers(bad, tokenizer=tok)
    with pytest.raises(ValueError, match=r"no field \['prompt'\]"):
        TextAnswers(path, tokenizer=tok, prompt_field="prompt")


def test_prompt_response_arrays():
    inputs, labels = prompt_response_arrays([[1, 2], [3]], [[4], [5, 6, 7]], width=5, pad_id=0)
    np.testing.assert_array_equal(inputs, [[1, 2, 4, 0, 0], [3, 5, 6, 7, 0]])
    np.testing.assert_array_equal(labels, [[-100, -100, 4, -100, -100], [-100, 5, 6, 7, -100]])
    with pytest.raises(ValueError, match="pair 1 has 1 prompt \\+ 5 response tokens = 6 > the row width 5"):
        prompt_response_arrays([[1], [2]], [[3], [4] * 5], width=5, pad_id=0)
    with pytest.raises(ValueError, match="pair 0 has an empty prompt"):
        prompt_response_arrays([[]], [[3]], width=5, pad_id=0)


def test_needle_layout_and_checker():
    from assocmem.training.verifiable import Needle

    task = Needle(seq_len=40, num_needles=3, num_filler=20, num_keys=8, num_values=6)
    assert task.vocab_size == 35 and task.row_length == 41
    for p in task.problems(50, seed=0):
        prompt = list(p.prompt)
        key, value = prompt[-1], p.reference[0]
        keys = [t for t in prompt[:-2] if 20 <= t < 28]
        assert len(prompt) == 40 and prompt[-2] == task.query_id and len(set(keys)) == len(keys) == 3
        assert prompt[prompt.index(key) + 1] == value and 28 <= value < 34
        assert all(t < 20 for i, t in enumerate(prompt[:-2]) if t not in keys and prompt[i - 1] not in keys)
        assert score_response(task, p, (value,), "strict") == (value, True)
        wrong = 28 + (value - 28 + 1) % 6
        assert score_response(task, p, (wrong,), "strict") == (wrong, False)
        assert score_response(task, p, (task.query_id,), "first") == (None, False)
    with pytest.raises(ValueError, match="num_needles=9 > num_keys=8"):
        Needle(num_needles=9, num_keys=8)
