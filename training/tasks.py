"""Synthetic tasks as ``datasets.Dataset`` with ``input_ids`` and ``labels``.

Label convention (Hugging Face causal LM): ``labels`` is aligned with
``input_ids`` and the shift happens in the loss, so the logits at position t
are scored against ``labels[t + 1]``; -100 marks unsupervised positions. Hence
``model(input_ids=..., labels=...).loss`` of any HF causal LM is the task loss.

- ``mqar_dataset``: multi-query associative recall, constructed as in Zoology
  (Arora et al. 2023).
- ``graph_walk_dataset``: in-context random walks on a fresh random graph per
  sequence (Park et al. 2025).
- ``selective_copy_dataset``: selective copying (Gu & Dao 2023, Mamba §4.1.1).
"""
from __future__ import annotations

from typing import Sequence

import datasets
import numpy as np
import pyarrow as pa

from .graphs import GRAPH_KINDS, make_graph, random_walk

IGNORE_INDEX = -100


def arrays_to_dataset(columns: dict[str, np.ndarray | list[str]]) -> datasets.Dataset:
    """Columns -> an in-memory Dataset: 2-D int arrays become fixed-length int32 sequences
    (built through pyarrow directly, which is ~50× faster than ``Dataset.from_dict``)."""
    arrays, features = {}, {}
    for name, value in columns.items():
        if isinstance(value, np.ndarray) and value.ndim == 2:
            rows, width = value.shape
            flat = pa.array(np.ascontiguousarray(value, dtype=np.int32).reshape(rows * width))
            arrays[name] = pa.FixedSizeListArray.from_arrays(flat, width)
            features[name] = datasets.Sequence(datasets.Value("int32"), length=width)
        else:
            arrays[name] = pa.array(list(value), type=pa.string())
            features[name] = datasets.Value("string")
    feats = datasets.Features(features)
    table = pa.table(arrays).cast(feats.arrow_schema)
    return datasets.Dataset(table, info=datasets.DatasetInfo(features=feats))


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


# ---------------------------------------------------------------- MQAR
def power_law_gap_probs(space: int, power_a: float) -> np.ndarray:
    """p(i) ∝ a·i^(a−1) for i = 1..space (Zoology's query-gap law), as float64 [space]."""
    i = np.arange(1, space + 1, dtype=np.float64)
    p = power_a * i ** (power_a - 1)
    return p / p.sum()


_CHUNK = 1024  # rows generated per vectorised batch


def _sample_without_replacement(rng: np.random.Generator, log_weights: np.ndarray, k: int) -> np.ndarray:
    """k distinct indices per row, in draw order, for _CHUNK rows at most.

    Gumbel-top-k: the k largest of log w_i + Gumbel noise, sorted decreasing,
    have the law of k successive draws without replacement with P(i) ∝ w_i
    (what ``numpy.random.choice(replace=False, p=w)`` draws per row in Zoology).
    Always draws _CHUNK rows (callers keep the first ones they need), so that a
    smaller dataset is a prefix of a larger one with the same seed.
    Returns int64 [_CHUNK, k].
    """
    scores = log_weights[None, :] + rng.gumbel(size=(_CHUNK, log_weights.shape[0]))  # [rows, n]
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]                              # [rows, k] unordered
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


def mqar_arrays(
    num_examples: int,
    seq_len: int,
    num_kv_pairs: int,
    *,
    vocab_size: int = 8192,
    power_a: float = 0.01,
    random_non_queries: bool = False,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """MQAR inputs and HF-aligned labels as int64 arrays [num_examples, seq_len].

    Construction (Zoology, per example):
      1. keys: num_kv_pairs distinct ids from [1, V/2); values: distinct ids from [V/2, V).
      2. context = k_1 v_1 k_2 v_2 ... (2K tokens).
      3. query region of L − 2K tokens, filled with 0; space = (L − 2K) // 2 slots.
      4. gaps g_1..g_K: distinct slots in 0..space−1 drawn without replacement
         with p(slot) ∝ a·i^(a−1), i = slot + 1 (power_a = a).
      5. key k_j is re-inserted at query-region offset 2·g_j, i.e. sequence
         position q_j = 2K + 2·g_j; the logits at q_j must predict v_j
         (HF-aligned: labels[q_j + 1] = v_j); every other label is −100.
      6. random_non_queries: every 0 becomes a uniform id in [0, V) (Zoology's
         option; the paper's Figure 2 keeps the 0 filler, the default here).
    """
    _check_positive(num_examples=num_examples, seq_len=seq_len, num_kv_pairs=num_kv_pairs, vocab_size=vocab_size)
    if seq_len % 2:
        raise ValueError(f"seq_len must be even (Zoology's MQAR), got {seq_len}")
    if vocab_size <= seq_len:
        raise ValueError(f"vocab_size must exceed seq_len (Zoology's MQAR), got vocab_size={vocab_size}, seq_len={seq_len}")
    if 4 * num_kv_pairs > seq_len:
        raise ValueError(f"need 4·num_kv_pairs <= seq_len (context 2K + K distinct query slots of width 2), "
                         f"got num_kv_pairs={num_kv_pairs}, seq_len={seq_len}")
    if vocab_size // 2 - 1 < num_kv_pairs:
        raise ValueError(f"vocab_size={vocab_size} has fewer than num_kv_pairs={num_kv_pairs} key ids")
    if not power_a > 0:
        raise ValueError(f"power_a must be > 0, got {power_a!r}")
    rng = np.random.default_rng(seed)
    K, L, half = num_kv_pairs, seq_len, vocab_size // 2
    context = 2 * K
    space = (L - context) // 2
    log_p = np.log(power_law_gap_probs(space, power_a))
    inputs = np.zeros((num_examples, L), dtype=np.int64)
    labels = np.full((num_examples, L), IGNORE_INDEX, dtype=np.int64)
    for lo in range(0, num_examples, _CHUNK):
        n = min(_CHUNK, num_examples - lo)
        rows = np.arange(lo, lo + n)[:, None]                                     # [n, 1]
        gaps = _sample_without_replacement(rng, log_p, K)[:n]                     # [n, K] in [0, space)
        kv = [(rng.choice(half - 1, size=K, replace=False) + 1,                   # K distinct keys in [1, V/2)
               rng.choice(vocab_size - half, size=K, replace=False) + half)       # K distinct values in [V/2, V)
              for _ in range(n)]
        keys, values = (np.stack(x) for x in zip(*kv))                            # [n, K] each
        inputs[rows, np.arange(0, context, 2)] = keys
        inputs[rows, np.arange(1, context, 2)] = values
        query_pos = context + 2 * gaps                                            # [n, K] re-inserted keys
        inputs[rows, query_pos] = keys
        labels[rows, query_pos + 1] = values                                      # predicted at query_pos
    if random_non_queries:
        noise = rng.integers(vocab_size, size=inputs.shape)
        inputs = np.where(inputs == 0, noise, inputs)
    return inputs, labels


def mqar_dataset(
    num_examples: int,
    seq_len: int,
    num_kv_pairs: int,
    *,
    vocab_size: int = 8192,
    power_a: float = 0.01,
    random_non_queries: bool = False,
    seed: int,
) -> datasets.Dataset:
    """Zoology's MQAR as a Dataset with ``input_ids`` and ``labels`` [seq_len] (see ``mqar_arrays``)."""
    inputs, labels = mqar_arrays(num_examples, seq_len, num_kv_pairs, vocab_size=vocab_size, power_a=power_a,
                                 random_non_queries=random_non_queries, seed=seed)
    return arrays_to_dataset({"input_ids": inputs, "labels": labels})


# ---------------------------------------------------------------- graph walks
def graph_walk_dataset(
    num_examples: int,
    seq_len: int,
    *,
    vocab_size: int = 512,
    kinds: Sequence[str] = GRAPH_KINDS,
    sizes: dict[str, int | tuple[int, int]] | None = None,
    first_token_id: int = 0,
    seed: int,
) -> datasets.Dataset:
    """In-context random walks, a fresh random graph per sequence.

    Per example: a graph kind uniform over ``kinds`` (sizes from ``sizes`` or
    the Park et al. defaults: 4×4 grid, ring of 10, 3×3 hexagonal lattice), N
    distinct random token ids from [first_token_id, vocab_size) for its nodes,
    and a uniform random walk of ``seq_len`` steps from a uniform start node.
    Every next token is supervised: labels = input_ids with labels[0] = −100.

    Columns: input_ids, labels [seq_len]; nodes [seq_len] (node id per step);
    node_tokens [N_max] (token of node i, −1 padded); kind (str).
    """
    _check_positive(num_examples=num_examples, seq_len=seq_len, vocab_size=vocab_size)
    unknown = sorted(set(kinds) - set(GRAPH_KINDS))
    if not kinds or unknown:
        raise ValueError(f"kinds must be a non-empty subset of {list(GRAPH_KINDS)}, got {list(kinds)}")
    graphs = {kind: make_graph(kind, size=(sizes or {}).get(kind)) for kind in kinds}
    n_max = max(g.number_of_nodes() for g in graphs.values())
    if vocab_size - first_token_id < n_max:
        raise ValueError(f"[first_token_id, vocab_size) = [{first_token_id}, {vocab_size}) has fewer ids than "
                         f"the largest graph's {n_max} nodes")
    rng = np.random.default_rng(seed)
    inputs = np.zeros((num_examples, seq_len), dtype=np.int64)
    nodes = np.zeros((num_examples, seq_len), dtype=np.int64)
    node_tokens = np.full((num_examples, n_max), -1, dtype=np.int64)
    names: list[str] = []
    for n in range(num_examples):
        kind = kinds[rng.integers(len(kinds))]
        graph = graphs[kind]
        tokens = rng.choice(vocab_size - first_token_id, size=graph.number_of_nodes(), replace=False) + first_token_id
        walk = random_walk(graph, seq_len, generator=rng)
        inputs[n], nodes[n] = tokens[walk], walk
        node_tokens[n, : len(tokens)] = tokens
        names.append(kind)
    labels = inputs.copy()
    labels[:, 0] = IGNORE_INDEX
    return arrays_to_dataset({"input_ids": inputs, "labels": labels, "nodes": nodes, "node_tokens": node_tokens,
                        "kind": names})


# ---------------------------------------------------------------- selective copying
SELECTIVE_COPY_NOISE, SELECTIVE_COPY_SEP, SELECTIVE_COPY_MARK = 0, 1, 2


def selective_copy_dataset(
    num_examples: int,
    seq_len: int,
    num_tokens: int,
    *,
    vocab_size: int = 16,
    seed: int,
) -> datasets.Dataset:
    """Selective copying (Mamba §4.1.1): recall the data tokens, in order, ignoring the noise.

    Layout of one example of length L = C + 1 + n (context C, n = num_tokens):
      positions 0..C−1: n data tokens from [3, V) at random sorted positions, noise token 0 elsewhere;
      position C: separator 1; positions C+1..C+n: marker token 2.
    The logits at C+i (the separator, then the markers) predict data token i
    (HF-aligned: labels[C+1+i] = data_i); every other label is −100. Inputs in
    the answer region are markers, so the model cannot copy from teacher forcing.
    """
    _check_positive(num_examples=num_examples, seq_len=seq_len, num_tokens=num_tokens, vocab_size=vocab_size)
    context = seq_len - 1 - num_tokens
    if context < num_tokens:
        raise ValueError(f"seq_len={seq_len} leaves a context of {context} < num_tokens={num_tokens} "
                         f"(need seq_len >= 2·num_tokens + 1)")
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be >= 4 (noise, separator, marker and a data token), got {vocab_size}")
    rng = np.random.default_rng(seed)
    inputs = np.full((num_examples, seq_len), SELECTIVE_COPY_NOISE, dtype=np.int64)
    labels = np.full((num_examples, seq_len), IGNORE_INDEX, dtype=np.int64)
    inputs[:, context] = SELECTIVE_COPY_SEP
    inputs[:, context + 1:] = SELECTIVE_COPY_MARK
    for n in range(num_examples):
        data = rng.integers(3, vocab_size, size=num_tokens)
        where = np.sort(rng.choice(context, size=num_tokens, replace=False))
        inputs[n, where] = data
        labels[n, context + 1:] = data
    return arrays_to_dataset({"input_ids": inputs, "labels": labels})
