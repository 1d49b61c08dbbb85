"""Chrome trace-event export of a run's collectives (open in chrome://tracing or ui.perfetto.dev).

Every ``CommRecord`` (one collective as one device ran it) becomes a complete event (``"ph":
"X"``) on its device's row, placed on the timeline of the alpha-beta model (``Topology``):
collectives do not overlap each other, so instruction ``i`` starts when the previous one ended,
at ``S_i = sum of T_j`` over the instructions before it, and lasts ``T_i = max_d t(i, d)``, its
slowest device. A device's event lasts its own ``t(i, d)``; the rest of ``T_i`` it waits. The
last event therefore ends at ``CommReport.estimate(topology).total``.

Instructions are ordered so that every device meets its collectives in its schedule order
(``position``): the next instruction is one that is next in line on every device taking part.
Times are in microseconds, as the format requires. Given a run's measured timeline, a second
process row shows every instruction as the devices really ran it (compute included).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Mapping

from .topology import Topology

if TYPE_CHECKING:
    from .comm import CommRecord, CommReport


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


def _rows(name: str, pid: int, devices) -> list[dict]:
    """The metadata events of one process row: its name, and a named, ordered row per device."""
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}]
    for d in sorted(devices):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": d, "args": {"name": f"device {d}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": d, "args": {"sort_index": d}})
    return events


def measured_events(timeline: Mapping[int, tuple], *, name: str, pid: int) -> list[dict]:
    """A run's measured timeline (``Execution.timeline``: per device, the ``Span`` of every
    instruction it ran, wall-clock seconds) as complete events on one process row, ``ts`` from
    the earliest start. ``free`` instructions are left out (they only drop buffers)."""
    spans = [sp for d in sorted(timeline) for sp in timeline[d] if sp.kind != "free"]
    if not spans:
        return _rows(name, pid, ())
    events = _rows(name, pid, timeline)
    t0 = min(sp.start for sp in spans)
    for sp in spans:
        events.append({
            "name": f"{sp.kind} {sp.source}".strip(), "cat": sp.kind, "ph": "X",
            "ts": (sp.start - t0) * 1e6, "dur": max(sp.end - sp.start, 0.0) * 1e6, "pid": pid, "tid": sp.device,
            "args": {"instr": sp.instr, "position": sp.position, "op": sp.source},
        })
    return events


def chrome_trace(report: "CommReport", topology: "Topology", *, name: str = "simshard", pid: int = 0,
                 metadata: Mapping | None = None, timeline: Mapping[int, tuple] | None = None) -> dict:
    """The trace as a JSON-ready dict: ``{"traceEvents": [...], "displayTimeUnit": "ns",
    "otherData": {...}}``. ``pid`` / ``name`` label the process row (several runs can share one
    file with distinct pids); ``metadata`` goes into ``otherData``. With ``timeline`` (a run's
    ``Execution.timeline``), a second row (``pid + 1``) shows what the devices measured: every
    compute and collective instruction as it really ran, beside the model's estimate."""
    by_instr: dict[int, list[CommRecord]] = defaultdict(list)
    for r in report.records:
        by_instr[r.instr].append(r)
    events = _rows(name, pid, {r.device for r in report.records})
    start = 0.0
    for instr in schedule_order(report.records):
        recs = sorted(by_instr[instr], key=lambda r: r.device)
        times = {r.device: topology.seconds(r) for r in recs}
        link = topology.link(recs[0].axes)  # the axes' link (with nodes: its intra-node part)
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
    if timeline is not None:
        events += measured_events(timeline, name=f"{name} (measured)", pid=pid + 1)
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
