"""A device's communication records, as plain rows: each collective it took part in, what its
transport counted for it and the analytic minimum beside it (``CommRecord``'s fields in order).

A device notes only what it ran (``Ran``: the id each collective ran under, at which position,
on which shapes); the rows are made from those notes, the program and the transfer log when
someone reads the records (``Execution.record_rows``), by the driver of a Ray run, never on
the path of a run: a step that nobody asks about its records pays a tuple per collective.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from simshard.report.collective_cost import analytic_min_bytes
from simshard.spmd import collective_run_as, participants


class Ran(NamedTuple):
    """One collective as a device ran it: the id it ran under, the position of the top-level
    instruction it belongs to (itself, or the loop, switch or while it ran in), its local input
    shape (``()`` for a permute's device that only receives), output shape and item size."""

    run_id: int
    position: int
    in_shape: tuple
    out_shape: tuple
    itemsize: int


def record_rows(me: int, schedule, ran: Sequence[tuple], counts: Callable) -> list[tuple]:
    """One row per collective of ``ran`` (``Ran`` fields) that ``me`` took part in, in the order
    run, with the transport log's ``counts``; ``schedule``: ``me``'s, whose instructions they
    ran."""
    rows, top = [], schedule.instrs
    for r in map(Ran._make, ran):
        ins = collective_run_as(top[r.position], r.run_id)
        group = participants(ins)
        if me not in group:
            continue
        sent, received, messages_sent, messages_received, peers = counts(me, r.run_id)
        rows.append((me, r.run_id, r.position, ins.source, ins.kind, tuple(getattr(ins, "axes", ())), group,
                     sent, received, messages_sent, messages_received,
                     analytic_min_bytes(ins, me, r.in_shape, r.out_shape, r.itemsize), peers))
    return rows
