"""A training run's collectives as the communication report's records, costed by the same code.

The analytic step does not invent its own collective formulas: each collective it runs is built
as the ``CommRecord`` the traced estimate would record for it (``report/collective_cost``'s
direct algorithms: the same bytes and messages per device, the same analytic minimum) on the
device group the 3-D layout gives it, and its time is ``Topology.seconds`` of that record (the
flat or hierarchical formulas of ``report/topology.py``). So the two estimates cannot disagree
on what a collective moves or costs; ``tests/report/test_training.py`` checks the bytes equal
on a step small enough to trace.

Device ids: tensor parallel innermost, then data, then pipeline (``model.Parallel``), so a
tensor-parallel group of up to a node's size sits inside one node.
"""

from __future__ import annotations

from typing import NamedTuple

from ..collective_cost import Cost, all_gather_cost, all_reduce_cost, analytic_min_bytes, balanced_chunks, reduce_scatter_cost
from ..comm import CommRecord
from ..topology import Topology
from .model import Parallel

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "collective_permute")


class Collective(NamedTuple):
    """What ``analytic_min_bytes`` reads of a collective instruction: its kind and group."""

    kind: str
    group: tuple[int, ...]


def group_of(axis: str, par: Parallel) -> tuple[int, ...]:
    """The first device group along ``axis`` (``tp``, ``dp`` or ``pp``): device 0's."""
    if axis == "tp":
        return tuple(range(par.tp))
    if axis == "dp":
        return tuple(i * par.tp for i in range(par.dp))
    if axis == "pp":
        return tuple(i * par.tp * par.dp for i in range(par.pp))
    raise ValueError(f"no parallel axis {axis!r} (tp, dp, pp)")


def record(kind: str, axis: str, par: Parallel, nbytes: int, itemsize: int, source: str) -> CommRecord:
    """Device 0's record of a ``kind`` collective of ``nbytes`` (an all-reduce's buffer, an
    all-gather's gathered result, a reduce-scatter's reduced input, a permute's block: a
    pipeline stage's send to the next) over ``axis``."""
    if kind not in KINDS:
        raise ValueError(f"no analytic record for collective kind {kind!r}")
    group = group_of(axis, par)
    if kind == "collective_permute":
        group = group[:2]
    g, n = len(group), max(int(nbytes) // itemsize, 0)
    if g == 1 or n == 0:
        return CommRecord(group[0], 0, 0, source, kind, (axis,), group, 0, 0, 0, 0, 0)
    chunks = balanced_chunks(n, g)
    if kind == "all_reduce":
        cost, shapes = all_reduce_cost(group, 0, n, itemsize), ((n,), (n,))
    elif kind == "all_gather":
        sizes = [c * itemsize for c in chunks]
        cost, shapes = all_gather_cost(group, 0, sizes, sum(sizes)), ((chunks[0],), (n,))
    elif kind == "reduce_scatter":
        cost, shapes = reduce_scatter_cost(group, 0, tuple(chunks), itemsize), ((n,), (chunks[0],))
    else:  # a stage sends its block to the next and receives the previous stage's
        cost, shapes = Cost(n * itemsize, n * itemsize, 1, 1), ((n,), (n,))
    if kind == "collective_permute":
        minimum = n * itemsize
    else:
        minimum = analytic_min_bytes(Collective(kind, group), group[0], shapes[0], shapes[1], itemsize, index=0)
    return CommRecord(group[0], 0, 0, source, kind, (axis,), group, cost.bytes_sent, cost.bytes_received,
                      cost.messages_sent, cost.messages_received, minimum)


class Traffic(NamedTuple):
    """Collectives run ``count`` times each: their seconds and bytes received, per device."""

    items: tuple[tuple[CommRecord, int], ...] = ()

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.items + other.items)

    def times(self, n: int) -> "Traffic":
        return Traffic(tuple((r, c * n) for r, c in self.items))

    def seconds(self, topology: Topology) -> float:
        return sum(topology.seconds(r) * c for r, c in self.items if r.bytes_received or r.bytes_sent)

    @property
    def bytes_received(self) -> int:
        return sum(r.bytes_received * c for r, c in self.items)

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r, c in self.items:
            out[r.kind] = out.get(r.kind, 0) + r.bytes_received * c
        return out


def traffic(*entries: tuple[str, str, int, int, str, int], par: Parallel) -> Traffic:
    """``Traffic`` of ``(kind, axis, nbytes, itemsize, source, count)`` entries."""
    return Traffic(tuple((record(k, a, par, b, i, s), c) for k, a, b, i, s, c in entries if c))


__all__ = ["Traffic", "group_of", "record", "traffic"]
