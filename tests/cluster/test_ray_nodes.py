"""The Ray backend on a local 2-node cluster with node_axes=("host",): the outer mesh axis across
nodes, the inner one inside a node.

A Megatron MLP on mesh {"host": 2, "y": 2}, gathered whole at the end: its all-reduce runs over
"y" (inside a node) and its all-gather over "host" (across nodes). The result is bitwise the local
backend's, and the communication records and transfer log show bytes crossing nodes only for the
collective over "host".

This module lives in tests/cluster/ (its fixtures shut down any Ray this worker had and start a
cluster), not next to tests/runtime/test_ray.py's session-wide local Ray."""

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.runtime.ray.nodes import node_plan

pytestmark = pytest.mark.ray_cluster

MESH = ss.Mesh({"host": 2, "y": 2})
IN = (P("host", None), P(None, "y"), P("y", None))
OUT = P(None, None)  # gathered whole: an all-gather over "host" after the all-reduce over "y"


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def bits(a):
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, a.tobytes()


def check_crossings(records, transfers, same_node):
    """Bytes between devices on different nodes only in collectives over "host"; none over "y"."""
    axes_of = {r.instr: r.axes for r in records}
    assert {r.axes for r in records} == {("y",), ("host",)}
    across = 0
    for r in records:
        for peer, sent, received in r.peers:
            if not same_node(r.device, peer):
                assert r.axes == ("host",), f"{r.kind} over {r.axes} moved bytes across nodes ({r.device}<->{peer})"
                across += sent + received
        if r.axes == ("y",):
            assert r.peers and all(same_node(r.device, p) for p, _, _ in r.peers), r
    assert across > 0
    # the devices' transfer log agrees: every cross-node message belongs to the "host" collective
    crossing = [e for e in transfers.entries if not same_node(e.device, e.peer)]
    assert crossing and all(axes_of[e.key[0]] == ("host",) and e.nbytes > 0 for e in crossing)
    assert any(axes_of[e.key[0]] == ("y",) for e in transfers.entries if same_node(e.device, e.peer))

def test_outer_axis_across_nodes_bitwise_and_only_host_collectives_cross(two_node_cluster):
    import ray

    from simshard.runtime.ray.driver.mesh import RayMesh

    args = ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    local = ss.run(mlp, *args, mesh=MESH, in_shardings=IN, out_shardings=OUT, backend="local")
    plan = node_plan(MESH, ("host",))

    # ss.run connects by itself: disconnect from the fixture's connection first
    ray.shutdown()
    res = ss.run(mlp, *args, mesh=MESH, in_shardings=IN, out_shardings=OUT, backend="ray",
                 address=two_node_cluster.address, node_axes=("host",))
    assert ray.is_initialized()
    assert len([n for n in ray.nodes() if n.get("Alive")]) == 2  # connected to the 2-node cluster
    assert res.verify.bitwise, str(res.verify)
    assert bits(res.outputs) == bits(local.outputs)
    assert res.comm.records == local.comm.records
    check_crossings(res.comm.records, res.execution.transfers, plan.same_node)

    # RayMesh: the actors really sit on the planned nodes, and the group goes with the mesh
    from ray.util.placement_group import placement_group_table

    with RayMesh(MESH, address=two_node_cluster.address, node_axes=("host",)) as devices:
        where = devices.device_nodes()
        actual = dict(zip(devices.devices, ray.get([devices.actors[d].node_id.remote() for d in devices.devices])))
        assert actual == where
        assert where[0] == where[1] and where[2] == where[3] and where[0] != where[2]
        assert set(where.values()) == {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        assert devices.plan.nodes == ((0, 1), (2, 3))
        run = devices.compile(mlp, *args, in_shardings=IN, out_shardings=OUT)(*args)
        assert bits(run.outputs) == bits(local.outputs)
        check_crossings(run.records, run.execution.transfers, lambda a, b: where[a] == where[b])
        pg = devices.placement_group
    assert devices.placement_group is None
    assert placement_group_table(pg)["state"] == "REMOVED"


@pytest.mark.parametrize("plane", ["sockets", "ray"])
def test_messages_across_nodes_go_by_tcp_on_the_sockets_plane(two_node_cluster, plane):
    """Two processes per node: a device reaches its process's devices directly, its node's other
    process by Unix socket and the other node's by TCP (on the ray plane: actor calls), and the
    run is bitwise either way."""
    from simshard.runtime.ray.driver.mesh import RayMesh

    mesh = ss.Mesh({"host": 2, "x": 2, "y": 2})
    args = ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    shardings = (P("x", None), P(None, ("host", "y")), P(("host", "y"), None))  # the all-reduce crosses nodes
    local = ss.run(mlp, *args, mesh=mesh, in_shardings=shardings, backend="local")
    with RayMesh(mesh, address=two_node_cluster.address, node_axes=("host",), devices_per_process=2,
                 data_plane=plane) as devices:
        routes = devices.routes(0)
        res = ss.run(mlp, *args, mesh=mesh, in_shardings=shardings, backend="ray", ray_mesh=devices)
    across = "tcp" if plane == "sockets" else "ray"
    assert routes == {1: "process", 2: "unix" if plane == "sockets" else "ray", 3: routes[2],
                      4: across, 5: across, 6: across, 7: across}
    assert res.verify.bitwise and bits(res.outputs) == bits(local.outputs)
    assert res.comm.records == local.comm.records
    # the driver's control line reaches only its own node's processes: this run is Ray calls
    assert res.execution.control_plane == "ray"
