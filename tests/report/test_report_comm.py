"""CommReport / MemoryReport: totals, tables with units, JSON, the alpha-beta estimate, the
analytic minimum's formulas."""

import json

import numpy as np
import pytest

from simshard.spmd import AllGather, AllReduce, AllToAll, CollectivePermute, ReduceScatter
from simshard.report import (
    CommRecord, CommReport, DeviceMemory, Link, MemoryReport, Topology, analytic_min_bytes, fmt_bytes, fmt_seconds,
)

MiB = 2**20


def rec(device, instr, kind, axes, sent, received, msgs=1, source="%1 dot", group=(0, 1), minimum=None):
    return CommRecord(
        device=device, instr=instr, position=instr, source=source, kind=kind, axes=axes, group=group,
        bytes_sent=sent, bytes_received=received, messages_sent=msgs, messages_received=msgs,
        min_bytes=received if minimum is None else minimum, peers=((1 - device, sent, received),),
    )


def sample() -> CommReport:
    return CommReport((
        rec(0, 0, "all_gather", ("x",), 3 * MiB, 3 * MiB, source="reshard a"),
        rec(1, 0, "all_gather", ("x",), 3 * MiB, 3 * MiB, source="reshard a"),
        rec(0, 1, "all_reduce", ("x", "y"), 1536, 2048, msgs=2, minimum=1024),
        rec(1, 1, "all_reduce", ("x", "y"), 2048, 1536, msgs=2, minimum=1536),
    ))


def test_units():
    assert fmt_bytes(12) == "12 B" and fmt_bytes(1536) == "1.50 KiB" and fmt_bytes(3 * MiB) == "3.00 MiB"
    assert fmt_bytes(5 * 2**30) == "5.00 GiB"
    assert fmt_seconds(2.5e-6) == "2.50 us" and fmt_seconds(0.25) == "250.00 ms" and fmt_seconds(3) == "3.00 s"


def test_totals_and_summaries():
    r = sample()
    assert r.total_bytes == 6 * MiB + 1536 + 2048 == r.total_received
    assert r.total_min_bytes == 6 * MiB + 2560
    assert r.bytes_sent(0) == 3 * MiB + 1536 and r.bytes_received(0) == 3 * MiB + 2048
    by_kind = {row["kind"]: row for row in r.summary("kind")}
    assert by_kind["all_reduce"]["collectives"] == 1 and by_kind["all_reduce"]["records"] == 2
    assert by_kind["all_reduce"]["messages"] == 4 and by_kind["all_reduce"]["ratio"] == pytest.approx(3584 / 2560)
    assert [row["axis"] for row in r.summary("axis")] == ["x", "x,y"]
    assert [row["op"] for row in r.summary("op")] == ["%1 dot", "reshard a"]
    assert [row["device"] for row in r.summary("device")] == [0, 1]
    assert r.peer_bytes() == {(0, 1): 3 * MiB + 1536, (1, 0): 3 * MiB + 2048}
    with pytest.raises(ValueError, match="summary by 'mesh'"):
        r.summary("mesh")


def test_tables_render_with_units():
    text = sample().render()
    for title in ("by source op", "by collective", "by mesh axes", "by device"):
        assert f"communication {title}" in text
    assert "6.00 MiB" in text and "3.50 KiB" in text and "1.40" in text and "total" in text
    assert "x,y" in text and "reshard a" in text


def test_json_round_trip():
    r = sample()
    text = r.to_json()
    data = json.loads(text)
    assert data["total_bytes"] == r.total_bytes and len(data["records"]) == 4
    assert data["by_kind"][0]["kind"] == "all_gather"
    assert CommReport.from_json(text).records == r.records


def test_alpha_beta_estimate():
    topo = Topology({"x": Link(1e9, 1e-6), "y": Link(1e10, 1e-7)}, library="direct")  # the direct algorithms' counts
    est = sample().estimate(topo)
    # instr 0 over x: max(sent, received) = 3 MiB, 1 message, on the x link
    t0 = 1e-6 * 1 + 3 * MiB / 1e9
    # instr 1 over x,y: the slower link (x's bandwidth and latency); the slowest device moves 2048 B in 2 messages
    t1 = 1e-6 * 2 + 2048 / 1e9
    assert est.total == pytest.approx(t0 + t1)
    assert est.by("kind") == pytest.approx({"all_gather": t0, "all_reduce": t1})
    assert est.by("axis") == pytest.approx({"x": t0, "x,y": t1})
    assert Topology.uniform(1e9).link(()) == Link(1e9, 0.0)
    with pytest.raises(KeyError, match="no link for mesh axis 'z'"):
        Topology({"x": Link(1e9)}).link(("z",))
    assert "estimated time by kind" in str(sample().estimate_table(topo).title)


@pytest.mark.parametrize("g", [1, 2, 3, 4, 8])
def test_analytic_minimum_formulas(g):
    group = tuple(range(g))
    item = 4
    n = 24  # elements of one device's buffer
    # all-gather of even blocks: (g-1)/g of the group's data
    ag = AllGather(0, "", src=0, dst=1, group=group, axis=0)
    assert analytic_min_bytes(ag, 0, (n,), (g * n,), item) == (g - 1) * n * item
    # reduce-scatter into even chunks: (g-1)/g of one device's buffer
    rs = ReduceScatter(0, "", src=0, dst=1, group=group, axis=0, splits=(n // g,) * g if n % g == 0 else (n,) + (0,) * (g - 1))
    if n % g == 0:
        assert analytic_min_bytes(rs, 0, (n,), (n // g,), item) == (g - 1) * (n // g) * item
    # all-reduce: 2(g-1)/g of the buffer per device (when g divides it), 2(g-1) N over the group
    ar = AllReduce(0, "", src=0, dst=1, group=group)
    per = [analytic_min_bytes(ar, d, (n,), (n,), item) for d in group]
    assert sum(per) == 2 * (g - 1) * n * item
    if n % g == 0:
        assert per == [2 * (g - 1) * n // g * item] * g
    # all-to-all of even chunks: (g-1)/g of the buffer
    if n % g == 0:
        a2a = AllToAll(0, "", src=0, dst=1, group=group, split_axis=0, splits=(n // g,) * g, concat_axis=0)
        assert analytic_min_bytes(a2a, 0, (n,), (n,), item) == (g - 1) * n // g * item
    cp = CollectivePermute(0, "", src=0, dst=1, pairs=((0, 1), (1, 1)) if g > 1 else ((0, 0),), shape=(n,))
    assert analytic_min_bytes(cp, 0, (n,), (n,), item) == 0


def test_memory_report_table_and_json():
    m = MemoryReport((
        DeviceMemory(1, 3 * MiB, 2, 7, "%4 dot", MiB, 2 * MiB, 4 * MiB),
        DeviceMemory(0, 1536, -1, None, "inputs", 1536, 1024),
    ))
    assert [d.device for d in m.devices] == [0, 1] and m.max_peak == 3 * MiB and m.peaks == {0: 1536, 1: 3 * MiB}
    text = m.render()
    assert "3.00 MiB" in text and "[7] %4 dot" in text and "1.50 KiB" in text and "4.00 MiB" in text
    assert MemoryReport.from_json(m.to_json()) == m
    with pytest.raises(KeyError, match="no memory record for device 5"):
        m[5]


def test_a_memory_report_of_wire_tuples_is_the_report_of_their_records():
    """``MemoryReport.of_wire`` (a run on Ray: records made only when read) equals the report built
    from the records, in its devices, its classes and its figures."""
    records = [DeviceMemory(d, (d % 2 + 1) * MiB, 2, 7, "%4 dot", MiB, MiB) for d in (3, 0, 2, 1)]
    lazy, eager = MemoryReport.of_wire(r.to_wire() for r in records), MemoryReport(records)
    assert lazy == eager and lazy.classes == eager.classes and [c.devices for c in lazy.classes] == [(0, 2), (1, 3)]
    assert MemoryReport.of_wire(r.to_wire() for r in records).peaks == {0: MiB, 1: 2 * MiB, 2: MiB, 3: 2 * MiB}


def test_reports_of_a_real_run():
    # Records built by the executor from the transport's counts flow into the report unchanged.
    from simshard.spmd import Schedule, SpmdProgram
    from simshard.runtime import run_local

    mesh_groups = [(0, 1, 2, 3)]
    scheds = tuple(
        Schedule(d, (0,), (AllGather(0, "%3 gather", src=0, dst=1, group=mesh_groups[0], axis=0, axes=("x",)),), (1,))
        for d in range(4)
    )
    ex = run_local(SpmdProgram(None, scheds, (), ()), {d: [np.full((256, 256), d, np.float32)] for d in range(4)})
    rep = ex.comm
    assert rep.total_bytes == rep.total_min_bytes == 4 * 3 * 256 * 256 * 4
    assert "3.00 MiB" in rep.render("device") and "1.00" in rep.render("kind")
    assert ex.memory.peak(0) == 256 * 256 * 4 * 5
    assert json.loads(rep.to_json())["by_axis"][0]["axis"] == "x"
