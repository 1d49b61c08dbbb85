"""Manual regions (partition/regions.py): devices share a region's instructions wherever theirs
are equal, so a shard_map costs one class of devices per distinct group, not one per device."""

import numpy as np

import simshard as ss
from simshard.manual import axis_index, ppermute, psum, shard_map
from simshard.partition import partition
from simshard.propagate.prepare import prepare

MESH = ss.Mesh({"x": 4, "y": 2})


def _classes(f, *args, in_shardings):
    program, _ = prepare(f, *args, mesh=MESH, in_shardings=in_shardings)
    spmd = partition(program)
    return len({id(s.instrs) for s in spmd.schedules}), spmd


def test_a_psum_over_x_is_one_class_per_x_group():
    f = shard_map(lambda a: psum(a * 2.0, "x"), mesh=MESH, in_specs=ss.P("x", "y"), out_specs=ss.P(None, "y"))
    n, spmd = _classes(f, np.arange(32.0).reshape(8, 4), in_shardings=(ss.P("x", "y"),))
    assert n == 2  # the devices with y = 0 and those with y = 1 all-reduce in different groups
    groups = {s.device: next(i.group for i in s.instrs if i.kind == "all_reduce") for s in spmd.schedules}
    assert groups[0] == (0, 2, 4, 6) and groups[1] == (1, 3, 5, 7)


def test_a_ppermute_and_axis_index_split_devices_only_by_their_index():
    def body(a):
        return ppermute(a + axis_index("x"), "x", [(k, (k + 1) % 4) for k in range(4)])

    f = shard_map(body, mesh=MESH, in_specs=ss.P("x"), out_specs=ss.P("x"))
    n, _ = _classes(f, np.arange(8.0), in_shardings=(ss.P("x"),))
    assert n == 4  # one literal per x index; the permute is one instruction for every device
