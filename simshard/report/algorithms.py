"""Collectives timed as an NCCL-like library runs them: ring, tree and hierarchical (two-level)
algorithms under the alpha-beta model, the fastest chosen per collective, its size and its group.

simshard executes its own (direct) algorithms, and its records count what those move; a real
training job runs NCCL (or a library like it), which picks for each call the algorithm its
tuning model predicts fastest (NCCL's ``src/graph/tuning.cc``: per collective, algorithm and
protocol a latency and a bandwidth, time = latency + bytes / bandwidth, the least chosen). This
module does the same with the topology's links: each candidate's alpha-beta time, derived in
docs/estimate.md (section "Collectives as NCCL runs them"), and the least of them.

A group of ``g`` devices spans ``b`` nodes with ``a`` devices on each (``g = a b``; without
``Nodes`` every device is its own node, reached over the axes' link). ``alpha_i, beta_i`` are the
link inside a node, ``alpha_o, beta_o`` the node link (the axes' link when there are no nodes);
``beta`` of a path that crosses nodes is the slower of the two. ``N`` is the payload: an
all-reduce's buffer, an all-gather's gathered result, a reduce-scatter's input, an all-to-all's
buffer on each device.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .compute import finite_number


class Span(NamedTuple):
    """A group as the algorithms see it: ``a`` devices on each of ``b`` nodes, the link inside a
    node (latency, bandwidth) and between nodes."""

    a: int
    b: int
    alpha_i: float
    beta_i: float
    alpha_o: float
    beta_o: float

    @property
    def g(self) -> int:
        return self.a * self.b

    @property
    def beta(self) -> float:
        """The bandwidth of a path through every member: the slowest link it crosses."""
        return self.beta_i if self.b == 1 else (self.beta_o if self.a == 1 else min(self.beta_i, self.beta_o))


class Choice(NamedTuple):
    """An algorithm and its time."""

    algorithm: str
    seconds: float


def ring_all_reduce(s: Span, n: float) -> float:
    """A reduce-scatter then an all-gather around a ring: ``2(g-1)`` steps of ``N/g`` bytes, of
    which ``2(b-1)`` cross a node boundary: ``2(g-b) alpha_i + 2(b-1) alpha_o + 2(g-1)/g N / beta``."""
    return 2 * (s.g - s.b) * s.alpha_i + 2 * (s.b - 1) * s.alpha_o + 2 * (s.g - 1) / s.g * n / s.beta


def tree_all_reduce(s: Span, n: float) -> float:
    """A reduce up and a broadcast down a (double binary) tree of the nodes, a chain inside each
    node, pipelined: ``2((a-1) alpha_i + ceil(log2 b) alpha_o) + 2 N / beta``."""
    depth = math.ceil(math.log2(s.b)) if s.b > 1 else 0
    return 2 * ((s.a - 1) * s.alpha_i + depth * s.alpha_o) + 2 * n / s.beta


def hierarchical_all_reduce(s: Span, n: float) -> float:
    """Reduce-scatter inside each node (``N/a`` per device), a ring all-reduce of that across the
    nodes, an all-gather inside: ``2(a-1)(alpha_i + N/(a beta_i)) + 2(b-1)(alpha_o + N/(g beta_o))``."""
    return 2 * (s.a - 1) * (s.alpha_i + n / (s.a * s.beta_i)) + 2 * (s.b - 1) * (s.alpha_o + n / (s.g * s.beta_o))


def ring_gather(s: Span, n: float) -> float:
    """An all-gather (``N`` the result) or reduce-scatter (``N`` the input) around a ring: ``g-1``
    steps of ``N/g``, ``b-1`` across nodes: ``(g-b) alpha_i + (b-1) alpha_o + (g-1)/g N / beta``."""
    return (s.g - s.b) * s.alpha_i + (s.b - 1) * s.alpha_o + (s.g - 1) / s.g * n / s.beta


def hierarchical_gather(s: Span, n: float) -> float:
    """The ``N/g`` blocks across the nodes, then ``N/a`` inside each:
    ``(b-1)(alpha_o + N/(g beta_o)) + (a-1)(alpha_i + N/(a beta_i))``."""
    return (s.b - 1) * (s.alpha_o + n / (s.g * s.beta_o)) + (s.a - 1) * (s.alpha_i + n / (s.a * s.beta_i))


def pairwise_all_to_all(s: Span, n: float) -> float:
    """Point-to-point sends of ``N/g`` to every peer, ``a-1`` inside the node and ``g-a`` across:
    ``(a-1)(alpha_i + N/(g beta_i)) + (g-a)(alpha_o + N/(g beta_o))``."""
    return (s.a - 1) * (s.alpha_i + n / (s.g * s.beta_i)) + (s.g - s.a) * (s.alpha_o + n / (s.g * s.beta_o))


# per collective kind, the algorithms a library may run (NCCL tunes the all-reduce's; the others
# have one each, or a hierarchical one where the group spans nodes evenly)
CANDIDATES = {
    "all_reduce": (("ring", ring_all_reduce), ("tree", tree_all_reduce), ("hierarchical", hierarchical_all_reduce)),
    "all_gather": (("ring", ring_gather), ("hierarchical", hierarchical_gather)),
    "reduce_scatter": (("ring", ring_gather), ("hierarchical", hierarchical_gather)),
    "all_to_all": (("pairwise", pairwise_all_to_all),),
}


def payload(kind: str, g: int, min_bytes: int) -> float:
    """A collective's payload ``N`` from a record's analytic minimum (``report/comm.py``): an
    all-reduce receives ``2(g-1)/g N`` at least, the others ``(g-1)/g N`` (exact for balanced
    chunks and blocks)."""
    if g <= 1:
        return 0.0
    return min_bytes * g / (2 * (g - 1)) if kind == "all_reduce" else min_bytes * g / (g - 1)


def fastest(kind: str, span: Span, n: float) -> Choice:
    """The least time among ``kind``'s algorithms on ``span`` for payload ``n`` (the hierarchical
    ones only where the group spans several nodes with several devices on each)."""
    finite_number(n, "a collective's payload")
    best = None
    for name, formula in CANDIDATES[kind]:
        if name == "hierarchical" and (span.a == 1 or span.b == 1):
            continue
        t = formula(span, n)
        if best is None or t < best.seconds:
            best = Choice(name, t)
    return best


__all__ = ["CANDIDATES", "Choice", "Span", "fastest", "hierarchical_all_reduce", "hierarchical_gather",
           "pairwise_all_to_all", "payload", "ring_all_reduce", "ring_gather", "tree_all_reduce"]
