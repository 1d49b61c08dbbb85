"""A program's schedules held per class of devices (``simshard.spmd.Schedules``): the partitioner
returns each class's instruction list once, the estimate walks the classes without a ``Schedule``
per device, and the per-device schedules, made when asked, are each device's own."""

from __future__ import annotations

import pickle

import numpy as np

import simshard as ss
from simshard import P
from simshard.report.estimate import estimate_spmd
from simshard.spmd import Schedule, ScheduleClass, Schedules, SpmdProgram, resolved


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def estimate(mesh: dict):
    args = [ss.ShapeDtype(s, np.float32) for s in [(256, 512), (512, 1024), (1024, 512)]]
    return ss.estimate(mlp, *args, mesh=ss.Mesh(mesh), in_shardings=(P("x", None), P(None, "y"), P("y", None)))


def test_an_estimate_on_8192_devices_makes_no_schedule_per_device():
    est = estimate({"x": 128, "y": 64})
    schedules = est.spmd.schedules
    assert isinstance(schedules, Schedules) and len(schedules) == 8192 and not schedules.is_made
    assert len(schedules.classes) < 200  # the all-reduce's 128 groups of 64, not 8,192 lists
    assert est.spmd.devices == tuple(range(8192)) and not schedules.is_made


def test_schedules_made_when_asked_are_each_devices_own():
    spmd = estimate({"x": 4, "y": 4}).spmd
    schedules = spmd.schedules
    made = list(schedules)
    assert schedules.is_made and [s.device for s in made] == list(spmd.devices)
    of = schedules.class_index()
    for s, k in zip(made, of.tolist()):
        c = schedules.classes[k]
        assert s.device in c.members and (s.inputs, s.outputs) == (c.inputs, c.outputs)
        # the device's own list: each instruction with its Varying fields (groups) resolved for it
        assert tuple(s.instrs) == tuple(resolved(c.instrs.shared(i), s.device) for i in range(len(c.instrs)))
    groups = {next(i.group for i in s.instrs if i.kind == "all_reduce") for s in made}
    assert len(groups) == 4  # 4 groups of 4 devices, one per row of the mesh: resolved per device


def test_the_partitioners_class_numbers_are_the_classes_members():
    schedules = estimate({"x": 8, "y": 16}).spmd.schedules
    found = Schedules(schedules.devices, schedules.classes).class_index()  # from the members alone
    assert np.array_equal(schedules.class_index(), found)
    assert sorted(d for c in schedules.classes for d in c.members) == list(schedules.devices)


def test_schedules_compare_and_pickle_as_the_tuple_of_them():
    spmd = estimate({"x": 2, "y": 4}).spmd
    plain = tuple(Schedule(s.device, s.inputs, tuple(s.instrs), s.outputs) for s in spmd.schedules)
    assert spmd.schedules == plain and plain == tuple(spmd.schedules)
    back = pickle.loads(pickle.dumps(spmd.schedules))
    assert isinstance(back, Schedules) and back == plain
    # a program given a plain tuple holds it as Schedules, each schedule its own class
    again = SpmdProgram(spmd.program, plain, spmd.in_shardings, spmd.out_shardings)
    assert again.schedules == spmd.schedules and len(again.schedules.classes) == 8
    assert again.schedules.classes[3] == ScheduleClass((3,), plain[3].inputs, plain[3].instrs, plain[3].outputs)
    walked, alone = estimate({"x": 2, "y": 4}), estimate_spmd(again)
    assert walked.comm.records == alone.comm.records
    assert [m for m in walked.memory.devices] == [m for m in alone.memory.devices]
