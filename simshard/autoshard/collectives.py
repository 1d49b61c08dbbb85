"""A reshard's collective, timed by the estimate's own function (``Topology.choice``).

The estimate times each collective record of a schedule with ``Topology.choice``: under
``library="nccl"`` (the default) the fastest of an NCCL-like library's algorithms (ring, tree,
hierarchical; ``report/algorithms.py``) for the record's kind, group and analytic minimum, under
``"direct"`` the algorithm simshard executes (its messages and bytes). The search prices the
collectives of a reshard the same way: each is written as the ``CommRecord`` its busiest device
would produce and handed to ``Topology.choice``, so the integer program's objective and the
estimate's step time come from one implementation, algorithm choice included.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from ..report.comm import CommRecord
from ..report.topology import Topology


class Collective(NamedTuple):
    """One collective of a reshard as its busiest member of one group sees it: kind, the mesh
    axes it runs over (the link), the group, bytes sent and received, messages, and the analytic
    minimum it must receive (``report/comm.py``'s ``min_bytes``)."""

    kind: str
    axes: tuple[str, ...]
    group: tuple[int, ...]
    sent: float
    received: float
    messages: int
    minimum: float


def record_of(c: Collective) -> CommRecord:
    """The record the estimate would hold for ``c`` (one device's view of it)."""
    return CommRecord(device=c.group[0] if c.group else 0, instr=0, position=0, source="autoshard", kind=c.kind,
                      axes=c.axes, group=c.group, bytes_sent=c.sent, bytes_received=c.received,
                      messages_sent=c.messages, messages_received=c.messages, min_bytes=c.minimum)


def collective_seconds(topology: Topology, collectives: Iterable[Collective]) -> float:
    """The step's time: its slowest group's (an instruction lasts as long as its slowest device),
    each timed by ``Topology.choice`` as the estimate times a record."""
    return max((topology.choice(record_of(c)).seconds for c in collectives), default=0.0)


def groups_to_time(topology: Topology, groups: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The groups whose times may differ: all of them where ``Topology.nodes`` places groups on
    nodes differently, else one (a group's time then depends on its size alone)."""
    return groups if topology.nodes is not None else groups[:1]


__all__ = ["Collective", "collective_seconds", "groups_to_time", "record_of"]
