"""``graph_path``: find a path between two nodes of a random graph given as an edge list in context.

Per problem (n = num_nodes, V = node_vocab):
  1. a random connected graph: node i (in a random order) joins a uniform earlier node (a random
     spanning tree), then ``extra_edges`` distinct non-edges are added uniformly;
  2. the n nodes get n distinct token ids from [0, V), so the model must read the graph from the
     context (no id means anything across problems);
  3. a query s → t: a uniform pair of distinct nodes at least ``min_hops`` edges apart.

Layout (special ids follow the node ids):

    prompt     u_1 v_1 SEP u_2 v_2 SEP … QUERY s t ANS       edges in random order and orientation
    reference  s x_1 … t EOS                                  a shortest path (breadth-first search,
                                                              neighbours in increasing node index)

The checker accepts any simple path from s to t along edges of the problem's graph (not only the
shortest), and rejects a path that repeats a node, leaves the graph or ends elsewhere.
"""
from __future__ import annotations

from collections import deque
from typing import Hashable, Sequence

import numpy as np
from pydantic import Field, model_validator

from .base import Problem, VerifiableTask, answer_segments

_TRIES = 100  # graphs drawn per problem before min_hops is declared unreachable


class GraphPath(VerifiableTask):
    """Path finding on a random connected graph written in context."""

    num_nodes: int = Field(8, ge=3, le=256, description="n, nodes of each graph")
    extra_edges: int = Field(4, ge=0, description="edges added to the random spanning tree (n − 1 edges)")
    node_vocab: int = Field(32, ge=3, description="V: node tokens are drawn from [0, V); V >= num_nodes")
    min_hops: int = Field(2, ge=1, description="the query's endpoints are at least this many edges apart")

    @model_validator(mode="after")
    def _fits(self) -> "GraphPath":
        n = self.num_nodes
        if self.node_vocab < n:
            raise ValueError(f"node_vocab={self.node_vocab} < num_nodes={n}: each node needs its own token id")
        if n - 1 + self.extra_edges > n * (n - 1) // 2:
            raise ValueError(f"extra_edges={self.extra_edges} does not fit: a simple graph on {n} nodes has at "
                             f"most {n * (n - 1) // 2} edges, the spanning tree uses {n - 1}")
        if self.min_hops > n - 1:
            raise ValueError(f"min_hops={self.min_hops} > num_nodes − 1 = {n - 1}: no two nodes are that far apart")
        return self

    # ------------------------------------------------------------ ids
    @property
    def sep_id(self) -> int:
        return self.node_vocab

    @property
    def query_id(self) -> int:
        return self.node_vocab + 1

    @property
    def ans_id(self) -> int:
        return self.node_vocab + 2

    @property
    def eos_id(self) -> int:
        return self.node_vocab + 3

    @property
    def pad_id(self) -> int:
        return self.node_vocab + 4

    @property
    def vocab_size(self) -> int:
        return self.node_vocab + 5

    @property
    def max_new_tokens(self) -> int:
        return self.num_nodes + 1  # a simple path visits each node at most once, then EOS

    @property
    def row_length(self) -> int:
        return 3 * (self.num_nodes - 1 + self.extra_edges) + 4 + self.max_new_tokens

    # ------------------------------------------------------------ problems
    def _edges(self, rng: np.random.Generator) -> list[tuple[int, int]]:
        """Edges of a random connected graph on nodes 0..n-1, as sorted pairs, in a random order."""
        n = self.num_nodes
        order = rng.permutation(n)
        edges = {tuple(sorted((int(order[i]), int(order[rng.integers(i)])))) for i in range(1, n)}
        absent = [(a, b) for a in range(n) for b in range(a + 1, n) if (a, b) not in edges]
        picks = rng.choice(len(absent), size=self.extra_edges, replace=False) if self.extra_edges else []
        edges |= {absent[int(i)] for i in picks}
        listed = sorted(edges)
        return [listed[int(i)] for i in rng.permutation(len(listed))]

    def problem(self, rng: np.random.Generator) -> Problem:
        n = self.num_nodes
        for _ in range(_TRIES):                                                 # a graph with a far enough pair
            edges = self._edges(rng)
            hops = {s: _bfs(n, edges, s) for s in range(n)}                     # distances and parents
            pairs = [(s, t) for s in range(n) for t in range(n) if s != t and hops[s][0][t] >= self.min_hops]
            if pairs:
                break
        else:
            raise ValueError(f"no graph with num_nodes={n}, extra_edges={self.extra_edges} had two nodes "
                             f"{self.min_hops} hops apart in {_TRIES} draws; lower min_hops or extra_edges")
        tokens = rng.choice(self.node_vocab, size=n, replace=False)            # token id of node i
        s, t = pairs[int(rng.integers(len(pairs)))]
        flip = rng.integers(2, size=len(edges))
        prompt: list[int] = []
        for (a, b), f in zip(edges, flip):
            u, v = (b, a) if f else (a, b)
            prompt += [int(tokens[u]), int(tokens[v]), self.sep_id]
        prompt += [self.query_id, int(tokens[s]), int(tokens[t]), self.ans_id]
        path = _path(hops[s][1], t)
        info = {"edges": [[int(tokens[a]), int(tokens[b])] for a, b in edges],
                "source": int(tokens[s]), "target": int(tokens[t])}
        return Problem(prompt=tuple(prompt), reference=(*(int(tokens[x]) for x in path), self.eos_id), info=info)

    # ------------------------------------------------------------ checking
    def candidates(self, response: Sequence[int]) -> list[Hashable]:
        segments = answer_segments(response, marker=self.ans_id, eos=self.eos_id, starts_with_answer=True)
        return [seg for seg in segments if seg and all(0 <= t < self.node_vocab for t in seg)]

    def check(self, problem: Problem, answer: Hashable | None) -> bool:
        if not isinstance(answer, tuple) or not answer:
            return False
        edges = {frozenset(e) for e in problem.info["edges"]}
        return (answer[0] == problem.info["source"] and answer[-1] == problem.info["target"]
                and len(set(answer)) == len(answer)
                and all(frozenset((a, b)) in edges for a, b in zip(answer, answer[1:])))

    def decode(self, ids: Sequence[int]) -> str:
        names = {self.sep_id: ";", self.query_id: "QUERY", self.ans_id: "ANS", self.eos_id: "EOS", self.pad_id: "PAD"}
        return " ".join(names.get(int(t), str(int(t))) for t in ids)


def _bfs(n: int, edges: list[tuple[int, int]], source: int) -> tuple[list[int], list[int]]:
    """Hop distances from ``source`` and BFS parents (neighbours visited in increasing node order)."""
    adjacency: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        adjacency[a].append(b)
        adjacency[b].append(a)
    dist, parent = [n] * n, [-1] * n
    dist[source] = 0
    queue = deque([source])
    while queue:
        x = queue.popleft()
        for y in sorted(adjacency[x]):
            if dist[y] == n:
                dist[y], parent[y] = dist[x] + 1, x
                queue.append(y)
    return dist, parent


def _path(parent: list[int], target: int) -> list[int]:
    """The path source → target read back from BFS parents."""
    path = [target]
    while parent[path[-1]] != -1:
        path.append(parent[path[-1]])
    return path[::-1]
