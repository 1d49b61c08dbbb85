"""A device's communication records, as plain rows: each collective it took part in, what its
transport counted for it and the analytic minimum beside it (``CommRecord``'s fields in order)."""

from __future__ import annotations

from typing import Callable, Sequence

from simshard.report.collective_cost import analytic_min_bytes
from simshard.spmd import participants


def record_rows(me: int, done: Sequence[tuple], counts: Callable) -> list[tuple]:
    """One row per collective of ``done`` ((instruction, position, in shape, out shape, itemsize)
    of each run) that ``me`` took part in, in the order run, with the transport log's ``counts``."""
    rows = []
    for ins, position, in_shape, out_shape, itemsize in done:
        group = participants(ins)
        if me not in group:
            continue
        sent, received, messages_sent, messages_received, peers = counts(me, ins.id)
        rows.append((me, ins.id, position, ins.source, ins.kind, tuple(getattr(ins, "axes", ())), group,
                     sent, received, messages_sent, messages_received,
                     analytic_min_bytes(ins, me, in_shape, out_shape, itemsize), peers))
    return rows
