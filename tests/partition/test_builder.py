"""The schedule builder (partition/builder.py): SPMD steps held once, as one instruction or a
PerDevice table; classes of devices refined by the steps where devices differ; every device's
schedule numbered by position, a class sharing one instruction tuple."""

import numpy as np
import pytest

from simshard.partition.builder import PerDevice, ScheduleBuilder
from simshard.spmd import Compute, Literal


def _lit(dst, v):
    return Literal(0, "test", dst=dst, value=np.int32(v))


def test_classes_split_only_where_devices_run_different_objects():
    b = ScheduleBuilder([0, 1, 2, 3])
    x = b.buf()
    b.emit_same(_lit(x, 0))
    b.emit_by(lambda d: d % 2, lambda d: _lit(x, d % 2))  # two values: evens and odds
    assert b.classes() == [[0, 2], [1, 3]]
    b.emit_keyed({3: 7}, 0, lambda v: _lit(x, v))  # device 3 alone differs
    assert b.classes() == [[0, 2], [1], [3]]
    y = b.buf()
    b.emit_same(Compute(0, "test", op="neg", inputs=(x,), outputs=(y,)))
    scheds = b.finish([], [y])
    assert [i.id for i in scheds[0].instrs] == list(range(len(scheds[0].instrs)))
    assert scheds[0].instrs is scheds[2].instrs and scheds[1].instrs is not scheds[3].instrs
    assert [int(i.value) for i in scheds[3].instrs if i.kind == "literal"] == [0, 1, 7]
    # the last read of x frees it, the same Free on every device
    assert scheds[0].instrs[-1].kind == "free" and scheds[0].instrs[-1] is scheds[3].instrs[-1]


def test_a_table_with_one_object_for_every_class_is_one_instruction():
    b = ScheduleBuilder([0, 1, 2])
    one = _lit(b.buf(), 5)
    b.emit(PerDevice(np.arange(3), np.array([0, 1, 0]), [one, one]))  # two classes, one object
    assert b.steps == [one] and b.classes() == [[0, 1, 2]]


def test_per_device_tables_read_as_mappings():
    t = PerDevice(np.array([3, 7, 8]), np.array([1, 0, 1]), ["a", "b"])
    assert dict(t) == {3: "b", 7: "a", 8: "b"} and len(t) == 3
    assert t.map(str.upper)[8] == "B"
    with pytest.raises(KeyError):
        t[4]
    assert dict(PerDevice.of_table(np.arange(4), np.array([[1, 2], [0, 0], [1, 2], [0, 0]]), lambda r: r)) == {
        0: (1, 2), 1: (0, 0), 2: (1, 2), 3: (0, 0)}


def test_devices_that_are_not_0_to_n_find_their_rows():
    """A mesh over devices 3, 7 and 8 (fewer ciphertexts, a sub-mesh): tables look rows up by id."""
    b = ScheduleBuilder([8, 3, 7])
    x = b.buf()
    b.emit_keyed({7: 1}, 0, lambda v: _lit(x, v))
    assert b.classes() == [[3, 8], [7]]
    scheds = {s.device: s for s in b.finish([], [x])}
    assert [int(i.value) for i in scheds[7].instrs if i.kind == "literal"] == [1]
    assert scheds[3].instrs is scheds[8].instrs


def test_a_class_reads_its_instructions_from_the_step_table_until_walked_whole():
    """A schedule's instruction list is the step table read for its class: indexing does not
    make the list; walking it does, once; it equals, hashes and pickles as the tuple."""
    import pickle

    from simshard.spmd import Instructions

    b = ScheduleBuilder([0, 1, 2])
    x = b.buf()
    b.emit_keyed({1: 5}, 0, lambda v: Literal(0, "k", dst=x, value=np.int32(v)))
    b.emit_same(Compute(0, "c", op="neg", inputs=(x,), outputs=(b.buf(),)))
    scheds = b.finish([], [])
    one = scheds[1].instrs
    assert isinstance(one, Instructions) and scheds[0].instrs is scheds[2].instrs
    assert int(one[0].value) == 5 and one._made is None
    assert [i.kind for i in one] == ["literal", "compute", "free"] and one._made is not None
    assert one == tuple(one) and hash(one) == hash(tuple(one)) and one != scheds[0].instrs
    assert pickle.loads(pickle.dumps(one)) == one and type(pickle.loads(pickle.dumps(one))) is tuple


def test_a_collective_over_a_mesh_axis_is_one_instruction_whose_groups_each_device_indexes():
    """A 2-D step's all-reduces over x and over y: each is one instruction holding its groups as a
    Varying table, so the 16 devices stay one class (with a tuple of groups per device, the x and
    y groups together would make every device its own); each device's own list names its own
    groups, in the mesh's order, and runs bitwise."""
    import simshard as ss
    from simshard import P
    from simshard.spmd import Instructions, Varying

    mesh = ss.Mesh({"x": 4, "y": 4})

    def f(a, b):
        return (a @ b).sum(axis=1)  # contracting over y, then summing the rows over x's columns

    args = ss.exact_inputs([(8, 8), (8, 8)], seed=0)
    res = ss.run(f, *args, mesh=mesh, in_shardings=(P("x", "y"), P("y", None)), out_shardings=P(None),
                 backend="local")
    assert res.verify.bitwise
    scheds = res.spmd.schedules
    assert all(isinstance(s.instrs, Instructions) for s in scheds)
    assert len({s.instrs.device_class for s in scheds}) == 1
    shared = [scheds[0].instrs.shared(i) for i in range(len(scheds[0].instrs))]
    assert any(isinstance(getattr(i, "group", None), Varying) for i in shared)
    names = list(mesh.shape)
    coords = {d: dict(zip(names, mesh.coords(d))) for d in res.spmd.devices}
    seen = set()
    for s in scheds:
        for ins in s.instrs:
            if ins.is_collective:
                seen.add(ins.axes)
                assert isinstance(ins.group, tuple) and s.device in ins.group
                want = tuple(d for d in res.spmd.devices
                             if all(coords[d][a] == coords[s.device][a] for a in names if a not in ins.axes))
                assert ins.group == want, (s.device, ins)
    assert seen == {("x",), ("y",)}


def test_a_slice_per_block_is_one_instruction_each_device_resolves():
    """Each device keeping its own block of a replicated value (a Slice per position), before and
    after a reshape: one instruction whose positions are Varying, so the 16 devices stay one
    class where their blocks have one shape; each device's own copy cuts its own block, the run
    is bitwise, and the estimate, which resolves them per member, records what the run records
    (an exchange's cuts: test_exchange.py)."""
    import simshard as ss
    from simshard import P
    from simshard.spmd import Varying

    mesh = ss.Mesh({"x": 4, "y": 4})

    def f(a):
        return (a * 2).reshape(8, 32)

    (a,) = ss.exact_inputs([(16, 16)], seed=1)
    specs = dict(mesh=mesh, in_shardings=(P(None, None),), out_shardings=P("x", "y"))
    res = ss.run(f, a, backend="local", **specs)
    assert res.verify.bitwise
    scheds = res.spmd.schedules
    assert len({s.instrs.device_class for s in scheds}) == 1
    shared = [scheds[0].instrs.shared(i) for i in range(len(scheds[0].instrs))]
    assert {i.kind for i in shared if any(isinstance(getattr(i, n, None), Varying) for n in ("index", "value", "src"))} \
        >= {"slice"}
    for s in scheds:  # every device's own slices name plain positions
        assert all(not isinstance(i.index, Varying) for i in s.instrs if i.kind == "slice")
    est = ss.estimate(f, ss.ShapeDtype(a.shape, a.dtype), **specs)
    assert est.comm.records == res.comm.records and est.memory == res.memory
