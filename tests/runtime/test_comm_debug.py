"""``CommDebugMode``: every run inside the block hands it its records (ss.run, a compiled call,
redistribute / full_tensor); modes nest; nothing is recorded outside."""

import numpy as np

import simshard as ss

dt = ss.dtensor
MESH = ss.Mesh({"x": 2, "y": 4})


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def test_counts_runs_and_redistributes_inside_the_block():
    args = ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    d = dt.distribute_tensor(args[0], MESH, "[S(0), S(1)]")
    d.redistribute(placements="[R, R]")  # before the block: not counted
    with dt.CommDebugMode() as comm:
        res = ss.run(mlp, *args, mesh=MESH, in_shardings=(ss.P("x", None), ss.P(None, "y"), ss.P("y", None)))
        with dt.CommDebugMode() as inner:
            e = d.redistribute(placements="[R, R]")
    assert comm.get_total_counts() == 3 and inner.get_total_counts() == 2
    assert comm.get_comm_counts() == {"all_reduce": 1, "all_gather": 2}
    assert comm.get_comm_op_counts() == {"output": {"all_reduce": 1}, "redistribute": {"all_gather": 2}}
    assert comm.get_comm_module_counts() == {"reshard %5 for output 0": {"all_reduce": 1},
                                             "redistribute [S(0), S(1)] -> [R, R]": {"all_gather": 2}}
    # the bytes are the runs' own
    assert comm.get_comm_bytes("op") == {"output": res.comm.total_received, "redistribute": e.last_comm.total_received}
    info = comm.get_sharding_info()
    assert info[0]["label"] == "ss.run mlp" and 'w1: <@mesh, [{}, {"y"}]>' in info[0]["inputs"]
    assert info[1]["from"] == "DTensorSpec(@mesh, [S(0), S(1)])" and info[1]["shape"] == (16, 32)
    assert "redistribute [S(0), S(1)] -> [R, R]" in str(comm)
    assert np.array_equal(e.full_tensor(), args[0])
    assert comm.get_total_counts() == 3  # the block is closed: full_tensor is not counted


def test_full_tensor_and_compiled_calls_are_counted():
    from simshard.runtime import LocalMesh

    devices = LocalMesh(MESH)
    x = ss.exact_inputs([(8, 8)], seed=1)[0]
    with dt.CommDebugMode() as comm:
        d = dt.distribute_tensor(x, devices, [dt.Shard(1), dt.Replicate()])
        assert np.array_equal(d.full_tensor(), x)
        f = devices.compile(lambda a: a.sum(0), d)
        assert np.array_equal(f(d).outputs, x.sum(0))
    assert comm.get_comm_op_counts()["redistribute"] == {"all_gather": 1}
    assert [ev.label for ev in comm.counts.events] == ["redistribute [S(1), R] -> [R, R]", "compiled call"]
