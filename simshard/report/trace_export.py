"""Chrome trace-event export of a run's collectives (open in chrome://tracing or ui.perfetto.dev).

Every ``CommRecord`` (one collective as one device ran it) becomes a complete event (``"ph":
"X"``) on its device's row, placed on the timeline of the alpha-beta model (``Topology``):
collectives do not overlap each other, so instruction ``i`` starts when the previous one ended,
at ``S_i = sum of T_j`` over the instructions before it, and lasts ``T_i = max_d t(i, d)``, its
slowest device. A device's event lasts its own ``t(i, d)``; the rest of ``T_i`` it waits. The
last event therefore ends at ``CommReport.estimate(topology).total``.

Instructions are ordered so that every device meets its collectives in its schedule order
(``position``): the next instruction is one that is next in line on every device taking part.
Times are in microseconds, as the format requires.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from .comm import CommRecord, CommReport, Topology


def schedule_order(records) -> list[int]:
    """Instruction ids in an order that follows every device's schedule (ties: lowest id)."""
    per_device: dict[int, list[CommRecord]] = defaultdict(list)
    members: dict[int, set[int]] = defaultdict(set)
    for r in records:
        per_device[r.device].append(r)
        members[r.instr].add(r.device)
    queues = {d: sorted(rs, key=lambda r: r.position) for d, rs in per_device.items()}
    head = {d: 0 for d in queues}
    order: list[int] = []
    while len(order) < len(members):
        ready = sorted({q[head[d]].instr for d, q in queues.items() if head[d] < len(q)})
        chosen = next((i for i in ready if all(queues[d][head[d]].instr == i for d in members[i])), None)
        if chosen is None:
            raise ValueError("devices meet their collectives in orders no single sequence follows "
                             f"(next in line: {ready}); the schedules would deadlock")
        order.append(chosen)
        for d in members[chosen]:
            head[d] += 1
    return order


def chrome_trace(report: "CommReport", topology: "Topology", *, name: str = "simshard", pid: int = 0,
                 metadata: Mapping | None = None) -> dict:
    """The trace as a JSON-ready dict: ``{"traceEvents": [...], "displayTimeUnit": "ns",
    "otherData": {...}}``. ``pid`` / ``name`` label the process row (several runs can share one
    file with distinct pids); ``metadata`` goes into ``otherData``."""
    from .comm import record_seconds

    by_instr: dict[int, list[CommRecord]] = defaultdict(list)
    for r in report.records:
        by_instr[r.instr].append(r)
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
    ]
    for d in sorted({r.device for r in report.records}):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": d, "args": {"name": f"device {d}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": d, "args": {"sort_index": d}})
    start = 0.0
    for instr in schedule_order(report.records):
        recs = sorted(by_instr[instr], key=lambda r: r.device)
        link = topology.link(recs[0].axes)
        times = {r.device: record_seconds(r, link) for r in recs}
        span = max(times.values())
        for r in recs:
            events.append({
                "name": f"{r.kind} {r.axis_key}",
                "cat": r.kind,
                "ph": "X",
                "ts": start * 1e6,
                "dur": times[r.device] * 1e6,
                "pid": pid,
                "tid": r.device,
                "args": {
                    "op": r.source, "collective": r.kind, "axes": list(r.axes), "group": list(r.group),
                    "instr": r.instr, "position": r.position,
                    "bytes_sent": r.bytes_sent, "bytes_received": r.bytes_received,
                    "messages_sent": r.messages_sent, "messages_received": r.messages_received,
                    "min_bytes": r.min_bytes, "instruction_us": span * 1e6,
                    "bandwidth_Bps": link.bandwidth, "latency_s": link.latency,
                },
            })
        start += span
    other = {"model": "alpha-beta, collectives in sequence (simshard.report.comm.Topology)",
             "topology": topology.to_dict(), "estimated_total_us": start * 1e6}
    other.update(metadata or {})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def write_chrome_trace(path, report: "CommReport", topology: "Topology", **kwargs) -> dict:
    """Write ``chrome_trace(...)`` to ``path`` as JSON; returns the dict written."""
    trace = chrome_trace(report, topology, **kwargs)
    with open(path, "w") as f:
        json.dump(trace, f, indent=1, allow_nan=False)
    return trace
