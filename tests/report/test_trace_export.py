"""Chrome trace export: the trace-event format, one row per device, each device's collectives
in its schedule order, and the alpha-beta timeline (it ends at the estimate's total)."""

import json

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.report import CommRecord, CommReport, Link, Topology
from simshard.report.trace_export import chrome_trace, schedule_order, write_chrome_trace

MESH = ss.Mesh({"x": 2, "y": 2})
TOPO = Topology({"x": Link(1e9, 2e-6)}, Link(4e9, 1e-6))


def gathered(a, b):
    return (a @ b) * 2.0


@pytest.fixture(scope="module")
def two_axes():
    """An all-gather over x, then one over y (the result gathered whole on every device)."""
    a, b = ss.exact_inputs([(8, 8), (8, 4)], seed=1)
    res = ss.run(gathered, a, b, mesh=MESH, in_shardings=(P("x", None), P(None, "y")), out_shardings=P())
    assert [row["axis"] for row in res.comm.summary(("instr", "axis"))] == ["x", "y"]
    return res.comm


def complete_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_trace_event_format(two_axes, tmp_path):
    trace = write_chrome_trace(tmp_path / "t.json", two_axes, TOPO, name="tiny/rows", metadata={"strategy": "rows"})
    assert json.loads((tmp_path / "t.json").read_text()) == trace
    assert isinstance(trace["traceEvents"], list) and trace["otherData"]["strategy"] == "rows"
    events = complete_events(trace)
    assert len(events) == len(two_axes.records) == 8
    for e in events:
        assert set(e) == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
        assert e["cat"] == e["args"]["collective"] == "all_gather" and e["name"] == f"all_gather {e['args']['axes'][0]}"
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {d: f"device {d}" for d in range(4)}
    assert {e["tid"] for e in events} == set(range(4))


def test_each_device_in_schedule_order_on_the_alpha_beta_timeline(two_axes):
    trace = chrome_trace(two_axes, TOPO)
    by_device = {}
    for e in complete_events(trace):
        by_device.setdefault(e["tid"], []).append(e)
    for d, events in by_device.items():
        positions = [e["args"]["position"] for e in events]
        assert positions == sorted(positions)
        for first, second in zip(events, events[1:]):
            assert second["ts"] >= first["ts"] + first["dur"]
    # device 0: 32 B to its x peer at 1 GB/s + 2 us, then 64 B over y at 4 GB/s + 1 us
    first, second = by_device[0]
    assert (first["args"]["axes"], second["args"]["axes"]) == (["x"], ["y"])
    assert first["ts"] == 0.0 and first["dur"] == pytest.approx(2 + 32e-3)
    assert second["ts"] == pytest.approx(first["args"]["instruction_us"])
    assert second["dur"] == pytest.approx(1 + 64 / 4e9 * 1e6)
    end = max(e["ts"] + e["dur"] for e in complete_events(trace))
    assert end == pytest.approx(two_axes.estimate(TOPO).total * 1e6) == trace["otherData"]["estimated_total_us"]


def test_the_megatron_mlp_all_reduce_as_documented():
    x, w1, w2 = ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    res = ss.run(lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2, x, w1, w2, mesh=ss.Mesh({"x": 2, "y": 4}),
                 in_shardings=(P("x", None), P(None, "y"), P("y", None)))
    topo = Topology({"x": Link(25e9, 5e-6), "y": Link(300e9, 1e-6)}, library="direct")
    events = complete_events(res.comm.to_chrome_trace(topo))
    assert len(events) == 8 and {e["tid"] for e in events} == set(range(8))
    assert all(e["dur"] == pytest.approx(6.005, abs=1e-3) for e in events)  # docs/cost-model.md


def _rec(device, instr, position):
    return CommRecord(device, instr, position, "op", "all_reduce", ("x",), (0, 1), 8, 8, 1, 1, 8)


def test_order_follows_the_schedules_not_the_instruction_ids():
    recs = [_rec(0, 5, 0), _rec(1, 5, 0), _rec(0, 2, 1), _rec(1, 2, 1)]
    assert schedule_order(recs) == [5, 2]
    trace = CommReport(recs).to_chrome_trace(Topology.uniform(8e9))
    assert [e["args"]["instr"] for e in complete_events(trace) if e["tid"] == 0] == [5, 2]


def test_schedules_that_would_deadlock_are_refused():
    recs = [_rec(0, 1, 0), _rec(0, 2, 1), _rec(1, 2, 0), _rec(1, 1, 1)]
    with pytest.raises(ValueError, match="would deadlock"):
        schedule_order(recs)


def test_a_measured_timeline_is_a_second_row_of_real_spans():
    a, b = ss.exact_inputs([(8, 8), (8, 4)], seed=1)
    res = ss.run(gathered, a, b, mesh=MESH, in_shardings=(P("x", None), P(None, "y")), out_shardings=P(),
                 backend="local")
    trace = chrome_trace(res.comm, TOPO, name="run", pid=0, timeline=res.execution.timeline)
    measured = [e for e in complete_events(trace) if e["pid"] == 1]
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"run", "run (measured)"}
    spans = [sp for d in sorted(res.execution.timeline) for sp in res.execution.timeline[d] if sp.kind != "free"]
    assert len(measured) == len(spans) and {e["cat"] for e in measured} >= {"compute", "all_gather"}
    assert min(e["ts"] for e in measured) == 0.0
    for d in MESH.device_ids:  # one device runs one instruction at a time, in schedule order
        row = sorted((e for e in measured if e["tid"] == d), key=lambda e: e["ts"])
        assert [e["args"]["position"] for e in row] == sorted(e["args"]["position"] for e in row)
        assert all(x["ts"] + x["dur"] <= y["ts"] + 1e-3 for x, y in zip(row, row[1:]))
