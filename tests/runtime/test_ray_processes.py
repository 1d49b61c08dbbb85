"""Several logical devices per Ray worker process (``RayMesh(devices_per_process=k)``): the same
bits, records and transfers as the local backend, messages inside a process never through Ray, a
lost process names its devices and is restarted whole, and 256 devices run on one machine."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import simshard as ss  # noqa: E402
from simshard import P  # noqa: E402
from simshard.runtime import DeviceLostError, run_local  # noqa: E402
from simshard.runtime.ray.driver.mesh import RayMesh  # noqa: E402
from test_ray import MEGATRON, MESH, bits, chain, every_collective, mlp  # noqa: E402


@pytest.fixture(scope="module")
def hosts4(ray_session):
    """8 devices in 2 processes of 4: a [2, 4] mesh's rows."""
    with RayMesh(MESH, devices_per_process=4) as devices:
        yield devices


def test_devices_share_processes_by_the_minor_mesh_axes(hosts4):
    assert hosts4.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    pids = {d: hosts4.pid(d) for d in hosts4.devices}
    assert len(set(pids.values())) == 2 and pids[0] == pids[3] != pids[4] == pids[7]


@pytest.mark.parametrize("cols", [6, 32768])  # inline messages, and 1 MiB blocks through the object store
def test_every_collective_bitwise_and_records_equal_to_local(hosts4, cols):
    spmd = every_collective(cols=cols)
    rng = np.random.default_rng(0)
    inputs = {d: [rng.standard_normal((8, cols)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    remote = hosts4.run_spmd(spmd, inputs)
    for d in spmd.devices:
        assert [bits(a) for a in remote.outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert remote.records == local.records
    assert remote.transfers.matrix() == local.transfers.matrix()  # messages inside a process count too
    assert remote.memory == local.memory


def test_mid_sized_messages_are_read_from_the_senders_memory_and_let_go(hosts4):
    """Blocks of 256 KiB and chunks of 64 KiB between the two processes are read by the receiver
    from the sender's memory (where the kernel allows it, as here): bitwise, and once the run is
    over no sender still keeps an array for a reader."""
    import time

    from simshard.runtime.wire.memory_reads import memory_reads_possible

    spmd = every_collective(cols=8192)
    rng = np.random.default_rng(4)
    inputs = {d: [rng.integers(-8, 8, (8, 8192)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    remote = hosts4.run_spmd(spmd, inputs)
    for d in spmd.devices:
        assert [bits(a) for a in remote.outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert remote.records == local.records
    for _ in range(100):  # a receiver's last "read" answers may still be on their way
        state = [ray.get(hosts4.actors[d].__ray_call__.remote(
            lambda host: [(c.cma, len(c.lent)) for c in host.connections.values()])) for d in (0, 4)]
        if all(n == 0 for conns in state for _, n in conns):
            break
        time.sleep(0.02)
    assert all(conns and all(n == 0 for _, n in conns) for conns in state), state
    if memory_reads_possible():
        assert all(cma for conns in state for cma, _ in conns)


def test_a_compiled_program_runs_with_one_call_per_process(hosts4):
    args = ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    compiled = hosts4.compile(mlp, *args, in_shardings=MEGATRON)
    res = compiled(*args)
    assert bits(res.outputs) == bits(mlp(*args))
    assert res.records == run_local(compiled.spmd, ss.runtime.shard_inputs(compiled.spmd, *args)).records
    assert res.controller_calls == {"line": 2}  # one run call per process, not per device


def test_a_lost_process_names_its_devices_and_is_restarted_whole(ray_session):
    spmd = chain()
    rng = np.random.default_rng(1)
    inputs = {d: [rng.standard_normal((8, 16)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    with RayMesh(devices=(0, 1, 2, 3), devices_per_process=2) as devices:
        key = devices.load(spmd, timeout=30.0)
        ray.kill(devices.actors[3])  # the process of devices 2 and 3
        with pytest.raises(DeviceLostError) as err:
            devices.execute(key, spmd, inputs)
        assert err.value.device == 2 and err.value.lost == (2, 3)
        assert "device 2's Ray actor died" in str(err.value)
        ray.kill(devices.actors[0])
        res = devices.execute(key, spmd, inputs, retries=1)
        assert res.attempts == 2 and res.restarted == (0, 1, 2, 3)
        assert devices.pid(0) == devices.pid(1) != devices.pid(2) == devices.pid(3)
        for d in spmd.devices:
            assert [bits(a) for a in res.outputs[d]] == [bits(a) for a in local.outputs[d]], d


@pytest.mark.parametrize("per, message", [(3, "does not divide the 8 devices"), (0, "positive int"),
                                          (2.0, "positive int")])
def test_a_bad_devices_per_process_is_refused(per, message):
    with pytest.raises(ValueError, match=message):
        RayMesh(MESH, devices_per_process=per)


def test_256_logical_devices_run_bitwise_on_one_machine(ray_session):
    mesh = ss.Mesh({"x": 16, "y": 16})
    args = ss.exact_inputs([(32, 16), (16, 32), (32, 16)], seed=0)
    res = ss.run(mlp, *args, mesh=mesh, in_shardings=(P("x", None), P(None, "y"), P("y", None)),
                 backend="ray", devices_per_process=32)
    assert res.verify.bitwise and len(res.spmd.devices) == 256
    assert {r.kind for r in res.comm.records} == {"all_reduce"}


def test_control_flow_nested_in_a_scan_runs_on_the_actors(hosts4):
    def f(ws, x):
        def layer(h, w):
            h = ss.lax.cond(np.sum(h) > 0, lambda h: np.maximum(h @ w, 0), lambda h: h @ w - 1, h)
            # a data-dependent trip count inside the body: halve until small
            h = ss.lax.while_loop(lambda h: np.max(np.abs(h)) > 64, lambda h: h * np.float32(0.5), h)
            return h, np.sum(h)
        return ss.lax.scan(layer, x, ws)

    ws, x = ss.exact_inputs([(3, 4, 4), (8, 4)], seed=1)
    res = ss.run(f, ws, x, mesh=MESH, in_shardings=(P(None, None, "y"), P("x", None)), backend="ray",
                 ray_mesh=hosts4)
    assert res.verify.bitwise
    body = next(e for e in res.program.eqns if e.op == "scan").kw["body"]
    assert [e.op for e in body.eqns if e.op in ("switch", "while")] == ["switch", "while"]


@pytest.mark.parametrize("plane, cols", [("ray", 6), ("sockets", 6), ("sockets", 65536)])
def test_both_data_planes_give_the_same_bits_records_and_transfers(ray_session, plane, cols):
    """cols=65536: 2 MiB blocks, which the sockets plane moves through shared-memory files. The
    files are written again run after run (the second run makes none) and gone with the mesh."""
    from simshard.runtime.wire.shared_memory import SHM_DIR, shared_memory_prefix

    spmd = every_collective(cols=cols)
    rng = np.random.default_rng(2)
    inputs = {d: [rng.standard_normal((8, cols)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    with RayMesh(MESH, devices_per_process=2, data_plane=plane) as devices:
        prefix = shared_memory_prefix(devices.secret)
        files = []
        for _ in range(2):
            remote = devices.run_spmd(spmd, inputs)
            outputs = dict(remote.outputs)  # fetched: they stay in the device processes until then
            files.append(sorted(n for n in os.listdir(SHM_DIR) if n.startswith(f"{prefix}-") and "-ring-" not in n))
            plane_ran, records, matrix = remote.data_plane, remote.records, remote.transfers.matrix()
            del remote  # its outputs released (one may be a view of a file), before the next run starts
            gc.collect()
            ray.get(devices.arrays.release_dropped())
        assert files[1] == files[0] and bool(files[0]) == (plane == "sockets" and cols == 65536)
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(f"{prefix}-")]  # removed with the mesh
    assert plane_ran == plane  # the report says which one ran
    for d in spmd.devices:
        assert [bits(a) for a in outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert records == local.records and matrix == local.transfers.matrix()


def test_an_unknown_data_plane_is_refused():
    with pytest.raises(ValueError, match="data_plane must be one of sockets, ray, not 'grpc'"):
        RayMesh(MESH, data_plane="grpc")


@pytest.mark.parametrize("n, cpus, per", [(8, 2, 4), (8, 16, 1), (64, 2, 32), (256, 2, 128), (16, 8, 2), (64, 8, 8),
                                          (12, 2, 6), (12, 5, 3), (7, 1, 7), (7, 4, 7), (4, 64, 1)])
def test_devices_per_process_by_default_keeps_a_core_per_process(n, cpus, per):
    """The fewest devices per process that leave each process a core (so it polls for messages)."""
    from simshard.runtime.ray.driver.groups import auto_per_process

    assert auto_per_process(n, cpus) == per


def test_a_large_mesh_groups_its_devices_by_default_a_cluster_does_not():
    from simshard.runtime.ray.driver.groups import auto_per_process

    big = ss.Mesh({"x": 8, "y": 8})
    assert len(RayMesh(big).groups) == 64 // auto_per_process(64)  # no actor starts until start()
    assert len(RayMesh(MESH).groups) == 8 // auto_per_process(8)  # a core per process
    assert len(RayMesh(big, address="127.0.0.1:1").groups) == 64  # on a cluster: one process per device


def test_a_socket_that_will_not_open_leaves_its_peers_to_ray_calls(ray_session):
    """A peer process whose socket refuses the connection (a firewall between nodes, say) is
    reached by Ray calls instead: the route says so, and the run is bitwise as before."""
    spmd = every_collective(cols=6)
    rng = np.random.default_rng(3)
    inputs = {d: [rng.standard_normal((8, 6)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    with RayMesh(MESH, devices_per_process=2) as devices:
        assert set(devices.routes(0).values()) == {"process", "unix"}
        # device 0's process told that every other process sits on another node, at a TCP port
        # nothing listens on
        elsewhere = {d: ("another node", addr, "tcp:127.0.0.1:1") for d, (_, addr, _) in devices.sockets.items()}
        ray.get(devices.actors[0].connect.remote(devices.actors, None, elsewhere, devices.secret))
        routes = devices.routes(0)
        assert routes[1] == "process" and {routes[d] for d in spmd.devices if d > 1} == {"ray"}
        remote = devices.run_spmd(spmd, inputs)
        outputs = dict(remote.outputs)
    for d in spmd.devices:
        assert [bits(a) for a in outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert remote.records == local.records


def test_devices_of_a_process_compute_at_once_with_the_bits_of_local(hosts4):
    """A process's four devices run their heavy products at the same time, a kernel thread each
    (``core/kernel_threads.py``), as four processes would: the first products of a process's
    devices overlap in time. Gaussian inputs: the bits are the local backend's."""
    from test_kernel_threads import gaussian_inputs, matmul_schedule

    from simshard.spmd import SpmdProgram

    spmd = SpmdProgram(None, tuple(matmul_schedule(d) for d in range(8)), (), ())
    inputs = gaussian_inputs(range(8))
    local = run_local(spmd, inputs)
    remote = hosts4.run_spmd(spmd, inputs, timeout=60.0)
    for d in spmd.devices:
        assert bits(remote.outputs[d][0]) == bits(local.outputs[d][0]), d
    for group in hosts4.groups:
        first = [remote.timeline[d][0] for d in group]
        start, end = max(s.start for s in first), min(s.end for s in first)
        assert start < end, [(s.start, s.end) for s in first]  # all four running at one moment
