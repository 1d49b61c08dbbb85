"""The record of every transfer: one row per message side, aggregated per (device, instruction).

A transport appends a row per send and per receive (``Transport.send`` / ``recv``); reports read
the totals. The local transport's one log holds every device's side; a Ray run's log joins the
rows its devices shipped back, packed (``TransferLog.of_packed``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from simshard.report.collective_cost import summed

from .packed_rows import unpack

Key = tuple  # a message's name: (instruction id, step)


class Transfer(NamedTuple):
    """One message as seen by one side: ``device`` sent it to / received it from ``peer``. (A
    named tuple: a run records two per message, and a log keeps and ships them as plain rows.)"""

    device: int
    peer: int
    direction: str  # "sent" or "received"
    key: Key
    nbytes: int


@dataclass
class PeerTotals:
    sent: int = 0
    received: int = 0
    messages_sent: int = 0
    messages_received: int = 0


@dataclass
class Totals:
    """What one device moved for one instruction (or over a run), per peer and in sum."""

    peers: dict[int, PeerTotals] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return sum(p.sent for p in self.peers.values())

    @property
    def received(self) -> int:
        return sum(p.received for p in self.peers.values())

    @property
    def messages_sent(self) -> int:
        return sum(p.messages_sent for p in self.peers.values())

    @property
    def messages_received(self) -> int:
        return sum(p.messages_received for p in self.peers.values())

    def peer_rows(self) -> tuple[tuple[int, int, int], ...]:
        return tuple((p, t.sent, t.received) for p, t in sorted(self.peers.items()))


class TransferLog:
    """Every transfer a transport made, aggregated per (device, instruction).

    The local transport's one log holds every device's side; a Ray device's transport holds only
    its own, and the driver's log of a Ray run joins the devices' ``rows`` (``of_rows``). Either way
    ``totals(device, instr)`` is the same. A log keeps a row per transfer and aggregates the rows
    when first asked (a message costs its sender and receiver one append each; a run that nobody
    asks about its transfers pays nothing more for them)."""

    def __init__(self, keep_entries: bool = True):
        self.keep_entries = keep_entries
        self._rows: list[tuple] = []  # each entry's fields (``Transfer``), plain tuples: cheap to keep and ship
        self._packed: list = []  # blobs of rows not unpacked yet (``of_packed``)
        # (device, instruction) -> peer -> [bytes sent, bytes received, messages sent, messages
        # received]: plain lists, as every message adds to them (``Totals`` are made when asked for)
        self._agg: dict[tuple[int, Any], dict[int, list[int]]] = {}
        self._summed = 0  # rows[:_summed] are in _agg

    @classmethod
    def of_rows(cls, rows: list[tuple]) -> "TransferLog":
        """A log of the transfers ``rows`` (``Transfer`` fields), aggregated on first use."""
        log = cls()
        log._rows = rows
        return log

    @classmethod
    def of_packed(cls, parts) -> "TransferLog":
        """A log of the rows in ``parts`` (each ``packed_rows.pack``'s blob, or plain rows), unpacked
        on first use."""
        log = cls()
        log._packed = list(parts)
        return log

    @property
    def rows(self) -> list[tuple]:
        """Every transfer's fields, in the order recorded (the packed parts unpacked first)."""
        if self._packed:
            self._rows.extend(row for part in self._packed for row in unpack(part))
            self._packed = []
        return self._rows

    @property
    def entries(self) -> list[Transfer]:
        """Every transfer, in the order recorded (built on each access)."""
        return [Transfer._make(r) for r in self.rows]

    def record(self, device: int, peer: int, direction: str, key: Key, nbytes: int) -> None:
        if self.keep_entries:  # summed when first asked for (not between two messages)
            rows = self.rows if self._packed else self._rows  # (a packed log's rows come first)
            rows.append((device, peer, direction, key, nbytes))
        else:
            self._add(device, peer, direction, key, nbytes)

    def _add(self, device: int, peer: int, direction: str, key: Key, nbytes: int) -> None:
        per = self._agg.get((device, key[0]))
        if per is None:
            per = self._agg[(device, key[0])] = {}
        counts = per.get(peer)
        if counts is None:
            counts = per[peer] = [0, 0, 0, 0]
        if direction == "sent":
            counts[0] += nbytes
            counts[2] += 1
        else:
            counts[1] += nbytes
            counts[3] += 1

    @property
    def _totals(self) -> dict[tuple[int, Any], dict[int, list[int]]]:
        """The aggregates, with any rows joined since they were last summed."""
        if self._summed < len(self.rows):
            for row in self.rows[self._summed:]:
                self._add(*row)
            self._summed = len(self.rows)
        return self._agg

    def totals(self, device: int, instr) -> Totals:
        """What ``device`` sent and received for instruction ``instr`` (the key's first part)."""
        per = self._totals.get((device, instr), {})
        return Totals({p: PeerTotals(*counts) for p, counts in per.items()})

    def counts(self, device: int, instr) -> tuple[int, int, int, int, tuple[tuple[int, int, int], ...]]:
        """``totals(device, instr)``'s figures in one pass: bytes sent, bytes received, messages
        sent, messages received and the peer rows (``Totals.peer_rows``), what a ``CommRecord``
        holds (an executor asks after every collective: no ``Totals`` made for it)."""
        per = self._totals.get((device, instr))
        return summed(per) if per else (0, 0, 0, 0, ())

    def device_totals(self, device: int) -> Totals:
        out = Totals()
        for (d, _), per in self._totals.items():
            if d != device:
                continue
            for p, (s, r, ms, mr) in per.items():
                o = out.peers.get(p)
                if o is None:
                    o = out.peers[p] = PeerTotals()
                o.sent += s
                o.received += r
                o.messages_sent += ms
                o.messages_received += mr
        return out

    def bytes_sent(self, device: int | None = None) -> int:
        return sum(c[0] for (d, _), per in self._totals.items() if device is None or d == device for c in per.values())

    def bytes_received(self, device: int | None = None) -> int:
        return sum(c[1] for (d, _), per in self._totals.items() if device is None or d == device for c in per.values())

    def matrix(self) -> dict[tuple[int, int], int]:
        """``(src, dst) -> bytes`` sent."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for (d, _), per in self._totals.items():
            for p, c in per.items():
                if c[0]:
                    out[(d, p)] += c[0]
        return dict(out)

    def merge(self, other: "TransferLog") -> None:
        for row in other.rows:
            self.record(*row)


