"""Communication reports: what every collective moved, beside the analytic minimum, and what that
costs under an alpha-beta model of the links.

``CommRecord`` is one collective instruction as one device saw it. Records are built from the
transport's own counts (logical payload bytes: the array bytes a message carries, whatever the
backend does to move them), so two backends running one schedule give equal records.

The analytic minimum of a record is the number of bytes the device *must receive* for that
collective, whatever the algorithm (``analytic_min_bytes``, in ``collective_cost``):

* all-gather: every block but its own, ``out - in`` (``(g-1)/g`` of the group's data when blocks
  are even);
* reduce-scatter: one contribution to its chunk from each other member, ``(g-1) * chunk``;
* all-reduce over ``N`` bytes: reduce-scatter then all-gather of ``g`` balanced chunks,
  ``(g-1) * c_i + (N - c_i)``; summed over the group this is ``2(g-1)N``, i.e. ``2(g-1)/g`` of
  the data per device;
* all-to-all: the chunks the other members hold for it, ``out - own chunk``;
* collective-permute: its whole block when another device sends it one, else 0.

Sums over a group of sent bytes equal sums of received bytes, so the group totals of the
minimum bound both.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..units import fmt_bytes, fmt_ratio, fmt_seconds, plain_text
from .reading import checked, read_entries
from .collective_cost import analytic_min_bytes, balanced_chunks  # noqa: F401  (importable from here, as before)
from .memory import fmt_devices
from .records import ClassRecord, Repeat, Weighted, device_major, weighted  # noqa: F401  (Repeat: importable from here)
from .topology import Link, Topology, record_seconds  # noqa: F401  (Link: importable from here, as before)

# -- records ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommRecord:
    """One collective instruction as run by one device."""

    device: int
    instr: int  # instruction id (shared by every device's copy of the SPMD step)
    position: int  # index of the instruction in this device's schedule
    source: str  # the program op (or reshard) it comes from
    kind: str  # all_gather, reduce_scatter, all_reduce, all_to_all, collective_permute, broadcast
    axes: tuple[str, ...]  # mesh axes of the group ('' when the group is not a mesh-axis group)
    group: tuple[int, ...]  # the device group (for a permute: every device named in a pair)
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    min_bytes: int  # analytic minimum this device must receive (module docstring)
    peers: tuple[tuple[int, int, int], ...] = ()  # (peer, bytes sent to it, bytes received from it)

    @property
    def messages(self) -> int:
        return self.messages_sent

    @property
    def axis_key(self) -> str:
        return ",".join(self.axes) if self.axes else "-"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["axes"] = list(self.axes)
        d["group"] = list(self.group)
        d["peers"] = [list(p) for p in self.peers]
        return d

    @staticmethod
    def from_dict(d: Mapping) -> "CommRecord":
        d = dict(d)
        d["axes"] = tuple(d["axes"])
        d["group"] = tuple(d["group"])
        d["peers"] = tuple(tuple(p) for p in d.get("peers", ()))
        return CommRecord(**d)


# -- topology and the alpha-beta model ------------------------------------------------------------


@dataclass(frozen=True)
class TimeEstimate:
    """Per instruction: (seconds, kind, source, axes, slowest device); and the total."""

    total: float
    instructions: tuple[tuple[int, float, str, str, tuple[str, ...], int], ...]
    topology: Topology
    algorithms: Mapping[int, str] = field(default_factory=dict)  # instruction -> the algorithm it was timed as

    def by_algorithm(self) -> dict[tuple[str, str], float]:
        """Seconds per (collective kind, algorithm chosen), e.g. ``("all_reduce", "tree")``."""
        out: dict = defaultdict(float)
        for instr, t, kind, *_ in self.instructions:
            out[(kind, self.algorithms.get(instr, "direct"))] += t
        return dict(out)

    def by(self, what: str | Sequence[str]) -> dict:
        """Seconds grouped by ``kind``, ``op`` or ``axis``; a tuple of them groups by each
        combination, keyed by tuples (``("op", "kind", "axis")``)."""
        out: dict = defaultdict(float)
        for _, t, kind, source, axes, _ in self.instructions:
            fields = {"kind": kind, "op": source, "axis": ",".join(axes) or "-"}
            key = fields[what] if isinstance(what, str) else tuple(fields[w] for w in what)
            out[key] += t
        return dict(out)

    def __str__(self) -> str:
        return f"estimated communication time {fmt_seconds(self.total)} over {len(self.instructions)} collectives"


# -- the report ----------------------------------------------------------------------------------

_GROUPINGS = ("op", "kind", "axis", "device", "instr")


class CommReport:
    """Every collective record of a run, with totals, tables, JSON and a time estimate.

    Built from records, or from ``items`` where some are ``Repeat``s (the estimate's scans) or
    ``ClassRecord``s (a step's record shared by a class of devices, ``report/records.py``):
    totals, summaries and the time estimate weigh each distinct record by its copies, and
    ``records`` lists every device's copy only when asked."""

    def __init__(self, records: Iterable[CommRecord] = (), items: Iterable | None = None):
        self.items = tuple(records) if items is None else tuple(items)
        compact = any(isinstance(it, (Repeat, ClassRecord)) for it in self.items)
        self._records = None if compact else self.items

    @property
    def records(self) -> tuple[CommRecord, ...]:
        """Every record, repeats and classes listed copy by copy (device by device, in the order
        they ran)."""
        if self._records is None:
            self._records = device_major(self.items)
        return self._records

    def weighted(self) -> Iterator[Weighted]:
        """Each distinct record with the id offsets of its copies (``(0,)`` for a record run once)
        and the devices that ran it."""
        return weighted(self.items)

    def __eq__(self, other) -> bool:
        return isinstance(other, CommReport) and self.records == other.records

    __hash__ = None  # a report compares by its records, and is not a key

    def __repr__(self) -> str:
        return f"CommReport({self.total_records} records)"

    # -- totals --------------------------------------------------------------------------------
    def _total(self, field: str) -> int:
        return sum(getattr(w.record, field) * w.copies for w in self.weighted())

    @property
    def total_records(self) -> int:
        return sum(w.copies for w in self.weighted())

    @property
    def total_bytes(self) -> int:
        """Bytes sent by all devices (equal to bytes received, every message being delivered)."""
        return self._total("bytes_sent")

    @property
    def total_received(self) -> int:
        return self._total("bytes_received")

    @property
    def total_min_bytes(self) -> int:
        return self._total("min_bytes")

    @property
    def total_messages(self) -> int:
        return self._total("messages_sent")

    @property
    def collectives(self) -> int:
        """Distinct collective instructions (SPMD steps) run."""
        return len({w.record.instr + o for w in self.weighted() for o in w.offsets})

    @property
    def ratio(self) -> float:
        """Received bytes over the analytic minimum (1.0 when both are zero)."""
        return self.total_received / self.total_min_bytes if self.total_min_bytes else (1.0 if not self.total_received else math.inf)

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted({d for w in self.weighted() for d in w.devices}))

    def bytes_sent(self, device: int) -> int:
        return sum(w.record.bytes_sent * len(w.offsets) for w in self.weighted() if device in w.devices)

    def bytes_received(self, device: int) -> int:
        return sum(w.record.bytes_received * len(w.offsets) for w in self.weighted() if device in w.devices)

    def for_device(self, device: int) -> tuple[CommRecord, ...]:
        return tuple(r for r in self.records if r.device == device)

    def peer_bytes(self) -> dict[tuple[int, int], int]:
        """``(src, dst) -> bytes`` sent, over the whole run (every member's rows, made here)."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for w in self.weighted():
            for r in (w.klass.expand() if w.klass is not None else (w.record,)):
                for peer, sent, _ in r.peers:
                    if sent:
                        out[(r.device, peer)] += sent * len(w.offsets)
        return dict(out)

    # -- summaries -----------------------------------------------------------------------------
    def summary(self, by: str | Sequence[str] = "kind") -> list[dict]:
        """Rows grouped by ``op`` (source), ``kind``, ``axis``, ``device`` or ``instr`` (or a tuple
        of them, one row per combination), each with collectives (distinct instructions),
        records, messages, sent, received, minimum, ratio."""
        keys = (by,) if isinstance(by, str) else tuple(by)
        if not keys or any(k not in _GROUPINGS for k in keys):
            raise ValueError(f"summary by {by!r}: choose one of {', '.join(_GROUPINGS)} (or a tuple of them)")
        rows: dict[Any, dict] = {}
        for r, offsets, devices, _ in self.weighted():
            # one row per copy where rows are per instruction, else every copy in one; one per
            # member where rows are per device, else the class in one
            for copies, devs in _row_parts(keys, offsets, devices):
                fields = {"op": r.source, "kind": r.kind, "axis": r.axis_key, "device": devs[0], "instr": r.instr + copies[0]}
                key = tuple(fields[k] for k in keys)
                row = rows.setdefault(key, {**{k: fields[k] for k in keys}, "collectives": set(), "records": 0,
                                            "messages": 0, "sent": 0, "received": 0, "minimum": 0})
                n = len(copies) * len(devs)
                row["collectives"].update(r.instr + o for o in copies)
                row["records"] += n
                row["messages"] += r.messages_sent * n
                row["sent"] += r.bytes_sent * n
                row["received"] += r.bytes_received * n
                row["minimum"] += r.min_bytes * n
        out = []
        for key in sorted(rows, key=lambda k: tuple((str(type(x)), x) for x in k)):
            row = rows[key]
            row["collectives"] = len(row["collectives"])
            row["ratio"] = row["received"] / row["minimum"] if row["minimum"] else (1.0 if not row["received"] else math.inf)
            out.append(row)
        return out

    def table(self, by: str = "kind"):
        """A rich Table of ``summary(by)`` with byte units, and a total row."""
        from rich.table import Table

        rows = _devices_joined(self.summary(by)) if by == "device" else self.summary(by)
        title = {"op": "source op", "kind": "collective", "axis": "mesh axes", "device": "device", "instr": "instruction"}[by]
        t = Table(title=f"communication by {title}", title_justify="left")
        t.add_column(title)
        for col in ("collectives", "messages", "sent", "received", "minimum", "ratio"):
            t.add_column(col, justify="right")
        for row in rows:
            t.add_row(
                str(row[by]), str(row["collectives"]), str(row["messages"]), fmt_bytes(row["sent"]),
                fmt_bytes(row["received"]), fmt_bytes(row["minimum"]), fmt_ratio(row["received"], row["minimum"]),
            )
        t.add_section()
        t.add_row(
            "total", str(self.collectives), str(self.total_messages), fmt_bytes(self.total_bytes),
            fmt_bytes(self.total_received), fmt_bytes(self.total_min_bytes),
            fmt_ratio(self.total_received, self.total_min_bytes),
        )
        return t

    def render(self, by: str | Sequence[str] = ("op", "kind", "axis", "device"), width: int = 100) -> str:
        """Plain-text tables (no colour), one per grouping."""
        return plain_text(*(self.table(b) for b in ([by] if isinstance(by, str) else by)), width=width)

    def __str__(self) -> str:
        return self.render()

    def __rich__(self):
        from rich.console import Group

        return Group(*(self.table(b) for b in ("op", "kind", "axis", "device")))

    # -- time ----------------------------------------------------------------------------------
    def estimate(self, topology: Topology) -> TimeEstimate:
        """The alpha-beta estimate (formulas on ``Topology``)."""
        # the slowest device of each instruction; copies of a record take its time under each
        # offset, so records are timed once per distinct record (and group) and offsets applied after
        slowest: dict[tuple[int, ...], dict[int, tuple]] = defaultdict(dict)  # offsets -> instr -> (time, device, record)
        for w in self.weighted():
            at = slowest[w.offsets]
            t, device, algorithm = _slowest_member(topology, w)
            r = w.record
            if r.instr not in at or (t, device) > at[r.instr][:2]:
                at[r.instr] = (t, device, r, algorithm)
        per: dict[int, tuple] = {}
        for offsets, at in slowest.items():
            for instr, best in at.items():
                for o in offsets:
                    if instr + o not in per or best[:2] > per[instr + o][:2]:
                        per[instr + o] = best
        rows, algorithms = [], {}
        for instr in sorted(per):
            t, dev, r, algorithms[instr] = per[instr]
            rows.append((instr, t, r.kind, r.source, r.axes, dev))
        return TimeEstimate(sum(r[1] for r in rows), tuple(rows), topology, algorithms)

    def estimate_table(self, topology: Topology, by: str = "kind"):
        from rich.table import Table

        est = self.estimate(topology)
        t = Table(title=f"estimated time by {by} (alpha-beta)", title_justify="left")
        t.add_column(by)
        t.add_column("time", justify="right")
        for key, secs in sorted(est.by(by).items()):
            t.add_row(key, fmt_seconds(secs))
        t.add_section()
        t.add_row("total", fmt_seconds(est.total))
        return t

    def to_chrome_trace(self, topology: Topology, **kwargs) -> dict:
        """The records as Chrome trace events on the alpha-beta timeline (``trace_export``)."""
        from .trace_export import chrome_trace

        return chrome_trace(self, topology, **kwargs)

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "total_bytes": self.total_bytes,
            "total_received": self.total_received,
            "total_min_bytes": self.total_min_bytes,
            "total_messages": self.total_messages,
            "by_op": _finite(self.summary("op")),
            "by_kind": _finite(self.summary("kind")),
            "by_axis": _finite(self.summary("axis")),
            "by_device": _finite(self.summary("device")),
            "records": [r.to_dict() for r in self.records],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @staticmethod
    def from_json(text: str) -> "CommReport":
        """The report ``to_json`` wrote; other text is a ``ReportFormatError`` naming the problem."""
        entries = read_entries(text, "a communication report", "records")
        return CommReport(tuple(CommRecord.from_dict(checked(CommRecord, r, f"a communication report: record {i}"))
                                for i, r in enumerate(entries)))

    @staticmethod
    def merge(reports: Iterable["CommReport"]) -> "CommReport":
        return CommReport(items=tuple(it for rep in reports for it in rep.items))


def _devices_joined(rows: list[dict]) -> list[dict]:
    """Per-device summary rows with equal figures as one row naming its devices (``fmt_devices``):
    a table of 8,192 devices doing two kinds of work has two rows."""
    joined: dict[tuple, dict] = {}
    for row in rows:
        figures = tuple(row[k] for k in ("collectives", "messages", "sent", "received", "minimum"))
        hit = joined.get(figures)
        if hit is None:
            joined[figures] = {**row, "device": [row["device"]]}
        else:
            hit["device"].append(row["device"])
    return [{**row, "device": fmt_devices(row["device"])} for row in joined.values()]


def _slowest_member(topology: Topology, w: Weighted) -> tuple[float, int, str]:
    """(seconds, device, algorithm) of the slowest member of a weighted record (the last device
    among equals): timed once per distinct group, which the time can depend on (nodes)."""
    if w.klass is None or topology.nodes is None:
        choice = topology.choice(w.record)
        return choice.seconds, w.devices[-1], choice.algorithm  # the last: devices are ascending
    times: dict[int, tuple] = {}
    best = (-1.0, -1, "")
    for d, group in zip(w.devices, w.klass.groups):
        choice = times.get(id(group))
        if choice is None:
            choice = times[id(group)] = topology.choice(replace(w.record, group=group))
        best = max(best, (choice.seconds, d, choice.algorithm))
    return best


def _row_parts(keys: tuple, offsets: tuple[int, ...], devices: tuple[int, ...]):
    """The (offsets, devices) each summary row of a weighted record takes (``summary``)."""
    per_copy = [(o,) for o in offsets] if "instr" in keys else [offsets]
    per_device = [(d,) for d in devices] if "device" in keys else [devices]
    return [(c, d) for c in per_copy for d in per_device]


def _finite(rows: list[dict]) -> list[dict]:
    """JSON has no infinity: a ratio over a zero minimum is written as null."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()} for row in rows]
