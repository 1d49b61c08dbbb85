"""The estimate's reports per class of devices (simshard/report/records.py, estimate/group_costs.py):
a step's members with equal figures share one ``ClassRecord``, memory is kept per class, and the
report expanded per device equals the per-device one record for record; what the report holds,
and the time estimate's work, do not grow with the device count."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import simshard as ss
from simshard import P, programs
from simshard.report.comm import CommReport
from simshard.report.records import ClassRecord
from simshard.report.topology import Nodes, Topology

TOPOLOGIES = (Topology({"y": "nvlink"}, "infiniband"), Topology({"y": "nvlink"}, "infiniband", Nodes(4, "infiniband")),
              Topology({"y": "nvlink"}, "infiniband", library="direct"))


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def mlp_estimate(mesh: dict):
    args = [ss.ShapeDtype(s, np.float32) for s in [(256, 512), (512, 1024), (1024, 512)]]
    return ss.estimate(mlp, *args, mesh=ss.Mesh(mesh), in_shardings=(P("x", None), P(None, "y"), P("y", None)))


@pytest.mark.parametrize("name, strategy", [("mlp", "2d"), ("mlp", "fsdp"), ("gpt", "2d"), ("transformer", "megatron")])
def test_the_per_class_report_equals_the_per_device_one_record_for_record(name, strategy):
    prog = programs.load(name)
    est = prog.estimate(strategy, mode="sgd")
    ran = prog.run(strategy, mode="sgd", backend="local")
    assert est.comm.records == ran.comm.records  # expanded: every device's records, in the order they ran
    assert any(isinstance(it, ClassRecord) and len(it.devices) > 1 for it in est.comm.items)
    per_device = CommReport(est.comm.records)  # the same report, one record per device and collective
    for by in ("op", "kind", "axis", "device", "instr", ("op", "kind", "axis")):
        assert est.comm.summary(by) == per_device.summary(by) == ran.comm.summary(by)
    assert est.comm.peer_bytes() == per_device.peer_bytes()
    assert [est.comm.bytes_received(d) for d in range(8)] == [per_device.bytes_received(d) for d in range(8)]
    for topo in TOPOLOGIES:
        a, b = est.comm.estimate(topo), per_device.estimate(topo)
        assert (a.total, a.instructions, a.algorithms) == (b.total, b.instructions, b.algorithms)
    assert est.memory == ran.memory and len(est.memory.classes) < len(est.memory.devices)


def test_the_report_holds_as_much_on_8192_devices_as_on_8():
    small, large = mlp_estimate({"x": 2, "y": 4}), mlp_estimate({"x": 128, "y": 64})
    assert len(small.comm.items) == len(large.comm.items) == 1  # one all-reduce over y, one class record
    (klass,) = large.comm.items
    assert len(klass.devices) == 8192 and len({id(g) for g in klass.groups}) == 128  # 128 groups of 64, shared
    assert len(small.memory.classes) == len(large.memory.classes)
    assert len(small.compute_classes) == len(large.compute_classes) == 1
    # the totals are the per-device sums: each device receives 2 (g-1)/g of its [2, 512] block
    assert large.comm.total_received == 8192 * 2 * 63 * 2 * 512 * 4 // 64
    assert large.comm.total_records == 8192


def test_the_time_under_nodes_is_worked_out_once_per_group_not_per_device(monkeypatch):
    est = mlp_estimate({"x": 128, "y": 64})
    topo = Topology({"y": "nvlink"}, "infiniband", Nodes(8, "infiniband"))
    spans = []
    original = Topology.span
    monkeypatch.setattr(Topology, "span", lambda self, group, link: spans.append(group) or original(self, group, link))
    t = est.comm.estimate(topo)
    assert len(spans) == 128  # each of the 128 groups of 64 devices (8 nodes of 8) once, not each of 8,192 devices
    # 4 KiB over 8 nodes of 8: latency decides, the tree's 2 (7 + log2 8) steps against the ring's 126
    assert list(t.algorithms.values()) == ["tree"]


def test_the_memory_table_and_the_device_table_list_classes_not_devices():
    est = programs.load("gpt").estimate("dp", mesh={"x": 32, "y": 32}, mode="sgd")
    text = est.memory.render(width=120)
    assert "64 devices: 0-63" in text and "960 devices: 64-1023" in text  # the batch of 64 over 1,024 devices
    assert len(text.splitlines()) < 12
    by_device = est.comm.render("device", width=120)
    assert len(by_device.splitlines()) < 12 and "1,023 devices: 1-1023" in by_device  # device 0 also sums the loss


@pytest.mark.parametrize("out", [P("x", None), None])
def test_a_large_group_is_costed_once_per_kind_of_position(out):
    """Over 128 devices (no per-peer rows) an all-reduce of 130 x 130 partial sums cuts 130 chunks
    longer than the rest, and a reduce-scatter of its 130 rows gives two devices two rows: each
    kind of position is costed once (``group_costs.position_kinds``), and the records still equal
    the executed run's."""
    a, w = ss.exact_inputs([(130, 256), (256, 130)], seed=0)
    kw = dict(mesh=ss.Mesh({"x": 128}), in_shardings=(P(None, "x"), P("x", None)), out_shardings=out)
    ran = ss.run(lambda a, w: a @ w, a, w, backend="local", **kw)
    est = ss.estimate(lambda a, w: a @ w, a, w, **kw)
    def plain(records):  # the estimate lists no per-peer rows for a group over 64 (docs/estimate.md)
        return [replace(r, peers=()) for r in records]

    assert plain(est.comm.records) == plain(ran.comm.records) and est.memory == ran.memory
    assert len(est.comm.items) == 2  # two kinds of member: longer and shorter chunks


def test_devices_are_named_as_runs_and_strides():
    from simshard.report.memory import fmt_devices

    assert fmt_devices(range(1024)) == "1,024 devices: 0-1023"
    assert fmt_devices([7]) == "7"
    assert fmt_devices(range(0, 8192, 8)) == "1,024 devices: 0, 8, 16, 24, ... every 8 to 8184"
    assert fmt_devices([d for d in range(8192) if d % 64 < 2]) == "256 devices: 0-1, 64-65, 128-129, 192-193, ... every 64 to 8129"
    assert fmt_devices([0, 1, 5, 9, 100, 200, 300]) == "7 devices: 0-1, 5, 9, 100, ... (2 more runs)"


def _plain(records):  # the estimate lists no per-peer rows for a group over 64 (docs/estimate.md)
    return [replace(r, peers=()) for r in records]


@pytest.mark.parametrize("shapes, shardings, out", [
    # an all-reduce over y of [3, 130] partial sums: 390 elements over 8 chunks, the first 6 longer
    ([(48, 64), (64, 130)], (P("x", "y"), P("y", None)), P("x", None)),
    # an all-gather over x of 10 rows in 16 blocks: positions of one group hold different blocks
    ([(10, 8), (8, 16)], (P("x", None), P(None, "y")), P(None, "y")),
    # a reduce-scatter over y of 13 rows: members get different rows
    ([(13, 64), (64, 13)], (P(None, "y"), P("y", None)), P("y", None)),
    # an all-reduce over y of 10 rows over x=16: groups of one row and groups of none, two patterns
    ([(10, 64), (64, 16)], (P("x", "y"), P("y", None)), P("x", None)),
])
def test_the_group_axis_records_equal_an_executed_run_on_a_mesh_of_128(shapes, shardings, out):
    """The step's members as arrays over its 16 or 8 groups (``group_axis``): where positions of
    a group differ (uneven chunks, blocks, splits) each member's figures and result block are
    read by its position, where groups differ they fall into patterns, and the report expanded
    per device equals the executed run's."""
    args = ss.exact_inputs(shapes, seed=1)
    kw = dict(mesh=ss.Mesh({"x": 16, "y": 8}), in_shardings=shardings, out_shardings=out)
    ran = ss.run(lambda a, w: a @ w, *args, backend="local", **kw)
    est = ss.estimate(lambda a, w: a @ w, *args, **kw)
    assert est.comm.records == ran.comm.records and est.memory == ran.memory
    assert len(est.comm.items) < est.comm.total_records  # kept per class, not per device


def test_a_step_resolves_its_instruction_once_whatever_its_number_of_groups(monkeypatch):
    """The work of a collective step does not grow with its groups: the 128 groups of 64 devices
    resolve the all-reduce once, as the 2 groups of 4 do, and make no [groups, length] table (every
    position holds the same); the report on 8,192 devices still equals its per-device expansion."""
    from simshard.report.estimate import group_axis

    calls, tables = [], []
    own = group_axis.own
    monkeypatch.setattr(group_axis, "own", lambda *a: calls.append(a) or own(*a))
    matrix = group_axis.GroupTable.matrix
    monkeypatch.setattr(group_axis.GroupTable, "matrix", lambda self, n: tables.append(n) or matrix(self, n))
    small = mlp_estimate({"x": 2, "y": 4})
    resolved = len(calls)
    large = mlp_estimate({"x": 128, "y": 64})
    assert len(calls) - resolved == resolved == 1 and not tables
    per_device = CommReport(large.comm.records)
    assert len(per_device.records) == 8192 == large.comm.total_records
    assert large.comm.summary("device") == per_device.summary("device")
    assert (large.comm.total_received, large.comm.total_min_bytes) == (per_device.total_received, per_device.total_min_bytes)
    for topo in TOPOLOGIES:
        a, b = large.comm.estimate(topo), per_device.estimate(topo)
        assert (a.total, a.algorithms) == (b.total, b.algorithms)
    assert small.comm.total_records == 8


def test_a_group_member_that_does_not_run_the_step_is_an_error_naming_it():
    """Every device of a collective's group runs the step; a schedule where one does not is
    refused, naming the instruction, the device and the group (not a KeyError)."""
    from simshard.report.estimate import EstimateError
    from simshard.report.estimate.blocks import Block
    from simshard.report.estimate.collectives import COSTS
    from simshard.report.estimate.group_axis import GroupTable, StepMembers, patterns
    from simshard.report.estimate.memo import Memo
    from simshard.spmd.instructions import AllReduce

    ins = AllReduce(7, "%3 dot_general", src=0, dst=1, group=(0, 1, 2), reduce_op="sum", axes=("y",))
    held = (ins, Block((4,), np.dtype(np.float32)))
    step = StepMembers(np.array([0, 1]), np.array([0, 0]), np.array([0, 0]), [0, 2], GroupTable([(0, 1, 2)]),
                       [held], [("key",)], [[0, 1]])
    with pytest.raises(EstimateError, match=r"\[7\] all_reduce from '%3 dot_general': device 2 is in the group \(0, 1, 2\)"):
        patterns("all_reduce", step, COSTS["all_reduce"], Memo())
