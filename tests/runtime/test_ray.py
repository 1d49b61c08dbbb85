"""The Ray backend: one actor per device, the same bits and the same communication records as the
local backend, O(devices) controller calls per run, and failures (a dead device, a mismatched
schedule) reported by name in bounded time.

One local Ray instance serves the whole session (2 cores: the actors take fractional CPUs), and
one 8-device RayMesh serves every test that does not kill a device."""

import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import simshard as ss  # noqa: E402
from simshard import P  # noqa: E402
from simshard.spmd import (  # noqa: E402
    AllGather, AllReduce, AllToAll, CollectivePermute, ReduceScatter, Schedule, SpmdProgram,
)
from simshard.runtime import DeviceLostError, PeerTimeoutError, ScheduleMismatchError, run_local  # noqa: E402
from simshard.runtime.ray.driver.mesh import RayMesh  # noqa: E402
from runtime_helpers import kill  # noqa: E402

MESH = ss.Mesh({"x": 2, "y": 4})
MEGATRON = (P("x", None), P(None, "y"), P("y", None))


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2




@pytest.fixture(scope="module")
def mesh8(ray_session):
    with RayMesh(MESH, devices_per_process=1) as devices:
        yield devices


@pytest.fixture(scope="module")
def args():
    return ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)


def spmd_of(per_device: dict, n_in: int = 1) -> SpmdProgram:
    return SpmdProgram(None, tuple(Schedule(d, tuple(range(n_in)), tuple(i), (0,)) for d, i in per_device.items()),
                       (), ())


def every_collective(devices=tuple(range(8)), cols: int = 6) -> SpmdProgram:
    """All-gather, reduce-scatter, all-reduce, all-to-all and a permute, on one [8, cols] float32
    block per device, in groups of 4 and the whole mesh."""
    rows = [(0, 1, 2, 3), (4, 5, 6, 7)]
    scheds = []
    for d in devices:
        g = rows[d // 4]
        instrs = (
            AllGather(1, "%1 ag", src=0, dst=1, group=g, axis=0, axes=("y",)),
            ReduceScatter(2, "%2 rs", src=1, dst=2, group=devices, axis=0, splits=(4,) * 8, axes=("x", "y")),
            AllReduce(3, "%3 ar", src=2, dst=3, group=g, axes=("y",)),
            AllToAll(4, "%4 a2a", src=0, dst=4, group=g, split_axis=0, splits=(2,) * 4, concat_axis=1, axes=("y",)),
            CollectivePermute(5, "%5 perm", src=4, dst=5, pairs=tuple((i, (i + 1) % 8) for i in devices),
                              shape=(2, 4 * cols), dtype="float32", axes=("x", "y")),
        )
        scheds.append(Schedule(d, (0,), instrs, (3, 5)))
    return SpmdProgram(None, tuple(scheds), (), ())


def bits(a):
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, a.tobytes()


@pytest.mark.parametrize("algorithm, cols", [("direct", 6), ("direct", 32768), ("ring", 32768), ("oneshot", 32768)])
def test_every_collective_bitwise_and_records_equal_to_local(mesh8, algorithm, cols):
    # 6 columns: every message inline in its call; 32768 (1 MiB blocks, INLINE_BYTES): through
    # the object store, an all-gather's block put once for all its receivers
    spmd = every_collective(cols=cols)
    rng = np.random.default_rng(0)
    inputs = {d: [rng.standard_normal((8, cols)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs, algorithm=algorithm)
    remote = mesh8.run_spmd(spmd, inputs, algorithm=algorithm)
    direct = run_local(spmd, inputs) if algorithm != "direct" else local
    for d in spmd.devices:
        assert [bits(a) for a in remote.outputs[d]] == [bits(a) for a in local.outputs[d]], d
        assert [bits(a) for a in remote.outputs[d]] == [bits(a) for a in direct.outputs[d]], d
        # each device timed each instruction, in schedule order
        assert [(sp.position, sp.instr) for sp in remote.timeline[d]] == [(sp.position, sp.instr) for sp in local.timeline[d]]
    assert remote.records == local.records  # kind, group, bytes and messages per peer, per device and instruction
    assert remote.transfers.matrix() == local.transfers.matrix()
    for d in spmd.devices:
        assert remote.transfers.device_totals(d).peer_rows() == local.transfers.device_totals(d).peer_rows()
    assert {r.kind for r in remote.records} == {"all_gather", "reduce_scatter", "all_reduce", "all_to_all",
                                                "collective_permute"}
    assert remote.memory == local.memory


def test_compiled_runs_again_and_controller_calls_do_not_grow_with_ops(mesh8, args):
    compiled = mesh8.compile(mlp, *args, in_shardings=MEGATRON)
    first = compiled(*args)
    assert np.array_equal(first.outputs, mlp(*args))
    local = run_local(compiled.spmd, ss.runtime.shard_inputs(compiled.spmd, *args))
    assert first.records == local.records
    again = compiled(*args)  # two runs: the same bits, the same records
    assert bits(again.outputs) == bits(first.outputs) and again.records == first.records
    # one device's shards without gathering the rest
    assert np.array_equal(again.shards(5)[0], again.outputs[8:])

    # a longer program (more ops, more collectives) costs the controller the same calls per run
    def deeper(x, w1, w2):
        h = x @ w1
        for _ in range(4):
            h = np.maximum(h, 0) * 2
        return (h @ w2).sum(axis=0)

    long = mesh8.compile(deeper, *args, in_shardings=MEGATRON)
    assert sum(len(s.instrs) for s in long.spmd.schedules) > sum(len(s.instrs) for s in compiled.spmd.schedules)
    res = long(*args)
    assert np.array_equal(res.outputs, deeper(*args))
    n = len(MESH.device_ids)
    for r in (first, again, res):
        # one run call per device process on its control line, the small input blocks in it: no
        # Ray call, no put
        assert r.controller_calls == {"line": n} and r.execution.control_plane == "sockets"
    assert res.controller_calls == again.controller_calls


def test_a_run_is_ray_calls_where_its_shards_are_large_or_in_the_object_store(mesh8, args):
    from simshard.runtime.wire.control_line import INLINE_MAX

    compiled = mesh8.compile(mlp, *args, in_shardings=MEGATRON)
    n = len(MESH.device_ids)
    on_lines = compiled(*args)
    big = ss.exact_inputs([(16, INLINE_MAX // 16), (INLINE_MAX // 16, 8), (8, 32)], seed=1)  # float32
    wide = mesh8.compile(mlp, *big, in_shardings=(P("x", None), P(None, None), P(None, "y")))
    by_ray = wide(*big)  # x's and w1's shards are over INLINE_MAX: every shard goes through the object store
    assert np.array_equal(by_ray.outputs, mlp(*big))
    assert by_ray.execution.control_plane == "ray" and by_ray.controller_calls["remote"] == n
    assert by_ray.controller_calls["put"] == 2 + 1 + 4  # one put per distinct block: x 2, w1 1, w2 4
    with RayMesh(MESH, data_plane="ray", devices_per_process=1) as calls_only:  # the Ray data plane: Ray calls throughout
        again = calls_only.compile(mlp, *args, in_shardings=MEGATRON)(*args)
        assert again.execution.control_plane == "ray" and again.controller_calls["remote"] == n
        assert bits(again.outputs) == bits(on_lines.outputs) and again.records == on_lines.records


def test_runs_from_several_threads_share_the_mesh_one_thread_at_a_time_on_the_lines(mesh8, args):
    import threading

    compiled = mesh8.compile(mlp, *args, in_shardings=MEGATRON)
    want = bits(mlp(*args))
    with mesh8.lines.lock:  # another thread's run is on the lines: this one is Ray calls
        res = compiled(*args)
    assert res.execution.control_plane == "ray" and bits(res.outputs) == want
    planes, errors = [], []

    def runs():
        try:
            for _ in range(4):
                r = compiled(*args)
                planes.append(r.execution.control_plane)
                assert bits(r.outputs) == want
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=runs) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(planes) == 12 and "sockets" in planes


def test_ss_run_on_ray_matches_local(ray_session, args):
    stages = []
    res = ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, backend="ray", retries=1, progress=stages.append)
    loc = ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, backend="local")
    assert stages == ["tracing and propagating", "partitioning", "starting 8 Ray device actors",
                      "running on 8 Ray device actors", "verifying against numpy"]
    assert res.verify.bitwise, str(res.verify)
    assert bits(res.outputs) == bits(loc.outputs)
    assert res.comm.records == loc.comm.records
    assert res.execution.values  # op by op checking ran on the devices' traced values too


def test_mismatched_schedule_names_both_devices_positions(mesh8):
    spmd = spmd_of({
        0: [AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1), axes=("x",))],
        1: [AllGather(2, "reshard", src=0, dst=0, group=(0, 1), axis=0, axes=("x",)),
            AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1), axes=("x",))],
    })
    start = time.perf_counter()
    with pytest.raises(PeerTimeoutError) as err:
        mesh8.run_spmd(spmd, {d: [np.ones((2, 2), np.float32)] for d in (0, 1)}, timeout=1.0)
    assert time.perf_counter() - start < 8.0
    e = err.value
    msg = str(e)
    assert e.devices in ((0, 1), (1, 0)) and set(e.positions) == {0, 1}
    assert "at position 0 [1] all_reduce over (0, 1) (axes x) from '%5 dot'" in msg
    assert "at position 0 [2] all_gather over (0, 1) (axes x) from 'reshard'" in msg
    # the mesh still works after a failed run
    ok = mesh8.run_spmd(spmd_of({d: [AllReduce(9, "ok", src=0, dst=0, group=(0, 1))] for d in (0, 1)}),
                        {d: [np.ones((2, 2), np.float32)] for d in (0, 1)})
    assert np.array_equal(ok.outputs[1][0], np.full((2, 2), 2, np.float32))


def test_a_dead_device_is_named_with_its_instruction_in_bounded_time(ray_session):
    with RayMesh(devices=(0, 1, 2), devices_per_process=1) as devices:
        # killed before the run: its peers wait for its part of the all-reduce
        spmd = spmd_of({d: [AllReduce(4, "%4 sum", src=0, dst=0, group=(0, 1, 2), axes=("x",))] for d in (0, 1, 2)})
        key = devices.load(spmd, timeout=60.0)
        kill(devices, 2)
        assert devices.lost() == [2]  # dead before the run (ray.kill does not wait for it)
        start = time.perf_counter()
        with pytest.raises(DeviceLostError) as err:
            devices.execute(key, spmd, {d: [np.ones((2,), np.float32)] for d in (0, 1, 2)})
        assert time.perf_counter() - start < 10.0  # not the 60 s receive timeout
        e = err.value
        assert e.device == 2 and e.instr == 4 and e.position == 0
        assert "device 2's Ray actor died" in str(e)
        assert "[4] all_reduce over (0, 1, 2)" in str(e)

    with RayMesh(devices=(0, 1, 2), devices_per_process=1) as devices:
        # killed during the run: device 1 is stuck waiting for device 2 (which never sends),
        # device 0 waits for device 1's part of instruction 7
        spmd = spmd_of({
            0: [AllReduce(7, "%7 sum", src=0, dst=0, group=(0, 1))],
            1: [AllReduce(6, "%6 sum", src=0, dst=0, group=(1, 2)), AllReduce(7, "%7 sum", src=0, dst=0, group=(0, 1))],
            2: [AllGather(5, "other", src=0, dst=0, group=(1, 2), axis=0)],
        })
        key = devices.load(spmd, timeout=60.0)
        box = {}

        def kill_soon():
            time.sleep(1.0)
            ray.kill(devices.actors[1])

        import threading

        t = threading.Thread(target=kill_soon)
        start = time.perf_counter()
        t.start()
        try:
            devices.execute(key, spmd, {d: [np.ones((2,), np.float32)] for d in (0, 1, 2)})
        except DeviceLostError as e:
            box["e"] = e
        t.join()
        assert time.perf_counter() - start < 12.0
        e = box["e"]
        assert e.device == 1 and e.instr == 7 and e.position == 1
        assert "device 0 was waiting for it" in str(e)


# -- retries: a dead device restarted and the program run again -----------------------------


def chain(devices=(0, 1, 2, 3), n=12) -> SpmdProgram:
    """``n`` rounds of all-reduce / all-gather / reduce-scatter / permute over 4 devices: a run long
    enough (tens of ms) for a kill to land in the middle of it."""
    scheds = []
    for d in devices:
        instrs, buf = [], 0
        for i in range(n):
            b = buf
            instrs += [
                AllReduce(4 * i + 1, f"%{i} ar", src=b, dst=b + 1, group=devices),
                AllGather(4 * i + 2, f"%{i} ag", src=b + 1, dst=b + 2, group=devices, axis=0),
                ReduceScatter(4 * i + 3, f"%{i} rs", src=b + 2, dst=b + 3, group=devices, axis=0,
                              splits=(8,) * len(devices)),
                CollectivePermute(4 * i + 4, f"%{i} perm", src=b + 3, dst=b + 4,
                                  pairs=tuple((p, (p + 1) % len(devices)) for p in devices),
                                  shape=(8, 16), dtype="float32"),
            ]
            buf += 4
        scheds.append(Schedule(d, (0,), tuple(instrs), (buf,)))
    return SpmdProgram(None, tuple(scheds), (), ())


@pytest.fixture(scope="module")
def mesh4(ray_session):
    with RayMesh(devices=(0, 1, 2, 3), devices_per_process=1) as devices:
        yield devices


def test_retries_restart_the_dead_device_and_rerun_bitwise(mesh4):
    spmd = chain()
    rng = np.random.default_rng(1)
    inputs = {d: [rng.standard_normal((8, 16)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    key = mesh4.load(spmd, timeout=30.0)
    old = mesh4.actors[2]
    ray.kill(old)
    res = mesh4.execute(key, spmd, inputs, retries=2)
    assert res.attempts == 2 and res.restarted == (2,) and mesh4.actors[2] != old
    for d in spmd.devices:
        assert [bits(a) for a in res.outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert res.records == local.records and res.transfers.matrix() == local.transfers.matrix()

    # without retries: the DeviceLostError names the device; the mesh is repaired on demand
    kill(mesh4, 1)
    assert mesh4.lost() == [1]  # dead before the run (ray.kill does not wait for it)
    with pytest.raises(DeviceLostError) as err:
        mesh4.execute(key, spmd, inputs)
    assert err.value.device == 1 and err.value.lost == (1,) and err.value.attempts == 1
    assert err.value.instr == 1 and "[1] all_reduce over (0, 1, 2, 3)" in str(err.value)
    assert mesh4.repair() == [1] and mesh4.lost() == []
    again = mesh4.execute(key, spmd, inputs)
    assert again.attempts == 1 and [bits(a) for a in again.outputs[1]] == [bits(a) for a in local.outputs[1]]


def test_kill_a_random_device_at_random_moments_never_a_wrong_result(mesh4):
    """A device killed before or during runs, again and again: with retries the result is
    bitwise correct; without, a DeviceLostError naming the device; never a hang, never a wrong
    result. (A kill that lands after the run loses that device's outputs: also a DeviceLostError.)"""
    import random
    import threading

    spmd = chain(n=4)
    rng = np.random.default_rng(2)
    inputs = {d: [rng.standard_normal((8, 16)).astype(np.float32)] for d in spmd.devices}
    expect = {d: [bits(a) for a in run_local(spmd, inputs).outputs[d]] for d in spmd.devices}
    key = mesh4.load(spmd, timeout=20.0)
    mesh4.execute(key, spmd, inputs).outputs.fetch()  # warm
    t0 = time.perf_counter()
    mesh4.execute(key, spmd, inputs).outputs.fetch()
    took = time.perf_counter() - t0
    pick = random.Random(5)
    outcomes = []
    start = time.perf_counter()
    for i in range(10):
        victim, retries = pick.choice(spmd.devices), (2 if i % 2 == 0 else 0)
        when = None if i % 4 in (0, 1) else pick.uniform(0, 1.5 * took)  # None: before the run
        killed = {}

        def kill(d=victim, delay=when):
            if delay:
                time.sleep(delay)
            killed["at"] = time.perf_counter()
            ray.kill(mesh4.actors[d])

        killer = threading.Thread(target=kill)
        if when is None:
            kill()
        else:
            killer.start()
        t = time.perf_counter()
        try:
            res = mesh4.execute(key, spmd, inputs, retries=retries)
            if when is not None:
                killer.join()
            try:
                got = {d: [bits(a) for a in res.outputs[d]] for d in spmd.devices}
                assert got == expect, f"run {i}: a wrong result"  # never
                outcomes.append(("ok", res.attempts))
            except DeviceLostError as e:  # the kill came after the run: the outputs went with it
                assert e.device == victim and "died after the run" in str(e), (i, str(e))
                outcomes.append(("outputs lost", 1))
        except DeviceLostError as e:
            assert retries == 0, f"run {i}: {e}"
            assert e.device == victim and f"device {victim}'s Ray actor died" in str(e)
            outcomes.append(("lost", e.attempts))
        killer.join() if killer.is_alive() else None
        # bounds against a hang, not a speed claim: a retried run restarts an actor process, which
        # takes seconds on a loaded 2-core machine (the receive timeout here is 20 s)
        assert time.perf_counter() - t < 30.0, f"run {i} took {time.perf_counter() - t:.1f} s"
        mesh4.repair()
    assert time.perf_counter() - start < 150.0
    assert any(o == "ok" and n > 1 for o, n in outcomes), outcomes  # a retried run succeeded
    assert any(o == "lost" for o, _ in outcomes), outcomes


def test_a_message_arriving_after_its_receiver_finished_is_reported(mesh4):
    # device 1 has nothing to do and is done long before device 0, busy with an all-reduce,
    # sends it a message: the message arrives late, and the run must not pass for a good one
    spmd = spmd_of({
        0: [AllReduce(2, "%2 sum", src=0, dst=0, group=(0, 2, 3)),
            CollectivePermute(3, "%3 perm", src=0, dst=1, pairs=((0, 1),), shape=(2,), dtype="float32")],
        1: [],
        2: [AllReduce(2, "%2 sum", src=0, dst=0, group=(0, 2, 3))],
        3: [AllReduce(2, "%2 sum", src=0, dst=0, group=(0, 2, 3))],
    })
    with pytest.raises(ScheduleMismatchError, match=r"device 0 sent message \(3, 0\) .* to device 1, which finished "
                                                    r"without receiving it"):
        mesh4.run_spmd(spmd, {d: [np.ones((2,), np.float32)] for d in range(4)})

def _listening(pids: set[int]) -> list[tuple[int, str]]:
    """(pid, local address) of every listening TCP socket of ``pids`` (Linux /proc)."""
    import ipaddress
    import os

    inodes = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found = []
    for name in ("tcp", "tcp6"):
        with open(f"/proc/net/{name}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                    continue
                raw = bytes.fromhex(cols[1].split(":")[0])
                # /proc stores the address as 32-bit words in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                addr = ipaddress.ip_address(raw)
                if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
                    addr = addr.ipv4_mapped
                found.append((inodes[cols[9]], str(addr)))
    return found


def _tree(root: int) -> set[int]:
    import os

    children: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(p))
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += children.get(p, [])
    return out


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads /proc")
def test_default_local_ray_is_loopback_only(mesh8):
    import os

    node = ray._private.worker._global_node
    if node is None or not node.head:
        pytest.skip("this session joined a Ray it did not start")
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert [n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")] == ["127.0.0.1"]
    # the GCS, the raylet, the agents and the device actors listen on loopback only
    sockets = _listening(_tree(os.getpid()))
    assert len({pid for pid, _ in sockets}) >= 3 + 8, sockets  # driver, GCS, raylet, 8 device actors at least
    assert all(ipaddress_is_loopback(a) for _, a in sockets), sockets


def test_a_local_ray_runs_the_devices_at_the_drivers_priority_not_in_the_background(mesh8):
    """Ray lowers its workers' priority (``nice`` 15) by default; a local Ray started here keeps
    the device processes at 0 (``start.WORKER_NICENESS``), so that a job beside the mesh does not
    take their cores from them (a scheduler weight of 1,024 against 36)."""
    import os

    from simshard.runtime.ray.start import WORKER_NICENESS

    node = ray._private.worker._global_node
    if node is None or not node.head:
        pytest.skip("this session joined a Ray it did not start")
    assert WORKER_NICENESS == 0
    mine = os.getpriority(os.PRIO_PROCESS, 0)  # (Ray adds its workers' niceness to what they inherit: ours)
    assert {os.getpriority(os.PRIO_PROCESS, mesh8.pid(d)) for d in (0, 7)} == {mine}


def ipaddress_is_loopback(a: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(a).is_loopback


def test_ray_is_the_default_backend_of_ss_run(ray_session, monkeypatch):
    monkeypatch.delenv("SIMSHARD_BACKEND", raising=False)
    import simshard as ss
    from simshard.runtime.front.api import default_backend

    assert default_backend() == "ray"
    mesh = ss.Mesh({"x": 2})
    x = np.arange(8.0).reshape(4, 2)
    # the module's other meshes hold most of the session's 2 CPUs: ask for little
    res = ss.run(lambda a: a * 2, x, mesh=mesh, in_shardings=ss.P("x"), actor_cpus=0)
    assert res.verify.bitwise and getattr(res.execution, "controller_calls", None)  # set only by the Ray backend


def test_actors_that_cannot_start_give_a_clear_error_not_a_hang(ray_session):
    import ray

    free = ray.available_resources().get("CPU", 0.0)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="could not start 2 device actors"):
        with RayMesh(devices=(0, 1), devices_per_process=1, actor_cpus=free + 1, start_timeout=2.0):
            pass
    assert time.perf_counter() - start < 15.0


def test_ss_run_on_a_kept_ray_mesh_reuses_its_actors(mesh8, args):
    actors = dict(mesh8.actors)
    loaded = set(mesh8.shipped)
    a = ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, backend="ray", ray_mesh=mesh8)
    b = ss.run(mlp, *args, mesh=MESH, in_shardings=(P(("x", "y"), None), P(), P()), backend="ray", ray_mesh=mesh8)
    assert a.verify.bitwise and b.verify.bitwise
    assert bits(a.outputs) == bits(b.outputs)
    assert mesh8.actors == actors  # the same actors ran both
    assert set(mesh8.shipped) == loaded  # each run's schedules were unloaded after it
    with pytest.raises(ValueError, match="does not hold"):
        ss.run(mlp, *args, mesh=ss.Mesh({"x": 16}), in_shardings=(P("x", None), P(), P()), backend="ray",
               ray_mesh=mesh8)


def test_backends_agree_bitwise_on_gaussian_inputs(mesh8):
    """BLAS splits a contraction by its thread count; every kernel runs on one BLAS thread on both
    backends, so Gaussian (inexact) float32 inputs give the same bits in one process and in eight."""
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s, dtype=np.float32) for s in ((64, 128), (128, 256), (256, 128)))
    shardings = (P("x", None), P(None, "y"), P("y", None))
    mesh = ss.Mesh({"x": 2, "y": 4})

    def mlp(x, w1, w2):
        return np.maximum(x @ w1, 0) @ w2

    local = ss.run(mlp, x, w1, w2, mesh=mesh, in_shardings=shardings, backend="local")
    on_ray = ss.run(mlp, x, w1, w2, mesh=mesh, in_shardings=shardings, backend="ray", ray_mesh=mesh8)
    assert local.outputs.tobytes() == on_ray.outputs.tobytes()


def test_an_unreachable_cluster_fails_fast_naming_the_address():
    from simshard.runtime.ray.start import _check_reachable

    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"cannot reach a Ray cluster at 127\.0\.0\.1:1: .*SIMSHARD_CONNECT_TIMEOUT"):
        _check_reachable("127.0.0.1:1", timeout=2.0)
    assert time.monotonic() - start < 5


def test_another_process_cannot_join_the_local_ray(ray_session):
    """The Ray simshard starts uses token authentication: a process without the token is refused."""
    import os
    import subprocess
    import sys

    address = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    intruder = "import ray; ray.init(address=%r); print('JOINED')" % address
    # refused, Ray's client either fails or keeps retrying; a join would print within seconds
    try:
        p = subprocess.run([sys.executable, "-c", intruder], env=env, capture_output=True, text=True, timeout=25)
        assert p.returncode != 0 and "JOINED" not in p.stdout
    except subprocess.TimeoutExpired as e:
        assert b"JOINED" not in (e.stdout or b"")


@pytest.fixture
def token_cluster():
    """A Ray head of its own (``ray start --head --block``, in its own process group, killed after
    the test) with token authentication: yields its address and token."""
    import os
    import secrets
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    ray_command = os.path.join(os.path.dirname(sys.executable), "ray")  # the venv's, whether or not it is on PATH
    head = subprocess.Popen([ray_command, "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false", "--disable-usage-stats"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "the token-auth Ray head did not start"
                time.sleep(0.5)
        yield f"127.0.0.1:{port}", token
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()


def test_joining_a_cluster_with_token_authentication(token_cluster):
    """``--address`` against a cluster with token authentication: without its token the CLI stops
    at once (exit 3) and says how to give the token; with RAY_AUTH_MODE / RAY_AUTH_TOKEN set, the
    same address joins."""
    import os
    import subprocess
    import sys

    address, token = token_cluster
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "simshard", "run", "mlp", "--address", address, "-q"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert f"the Ray cluster at {address}" in p.stderr and "refused this process" in p.stderr
    assert "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in p.stderr and "ray get-auth-token" in p.stderr
    assert time.monotonic() - start < 30  # not Ray's 20 s of retries on top of the start-up
    joiner = ("from simshard.runtime.ray_start import ensure_ray; import ray; ensure_ray(%r); "
              "print('JOINED', sorted(ray.cluster_resources()))" % address)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    p = subprocess.run([sys.executable, "-c", joiner], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "JOINED" in p.stdout and "CPU" in p.stdout, p.stderr


def test_a_device_lost_before_loading_is_named_and_retries_recover_it(mesh4):
    devs = tuple(mesh4.devices)
    spmd = spmd_of({d: [AllReduce(3, "%3 sum", src=0, dst=0, group=devs, axes=("x",))] for d in devs})
    inputs = {d: [np.full((2,), d + 1, np.float32)] for d in devs}
    ray.kill(mesh4.actors[1])  # an idle mesh loses a device
    deadline = time.monotonic() + 30
    while mesh4.lost(timeout=1.0) != [1] and time.monotonic() < deadline:  # ray.kill returns at once
        time.sleep(0.1)
    with pytest.raises(DeviceLostError) as err:
        mesh4.load(spmd, timeout=30.0)
    assert err.value.lost == (1,) and "device 1: Ray actor gone while the program was loading" in str(err.value)
    key = mesh4.load(spmd, timeout=30.0, retries=1)  # restarted, and loaded
    res = mesh4.execute(key, spmd, inputs)
    total = float(sum(d + 1 for d in devs))
    assert all(np.array_equal(res.outputs[d][0], np.full((2,), total, np.float32)) for d in devs)


def test_a_scan_runs_as_one_loop_on_the_actors_bitwise(mesh4):
    """A training step over layers in ss.lax.scan: the loop (and its derivative's loop) ship to
    the actors as data and run there, collectives of every iteration under their own ids."""
    ws, x = ss.exact_inputs([(3, 8, 8), (16, 8)], seed=0, max_abs=1)

    def loss(ws, x):
        h, _ = ss.lax.scan(lambda h, w: (np.maximum(h @ w, 0), None), x, ws)
        return np.sum(h * h)

    def step(ws, x):
        value, g = ss.value_and_grad(loss)(ws, x)
        return value, ws - 2.0**-10 * g

    kw = dict(mesh=ss.Mesh({"x": 4}), in_shardings=(P(None, "x", None), P("x", None)), out_shardings=(P(), P(None, "x", None)))
    local = ss.run(step, ws, x, backend="local", **kw)
    on_ray = ss.run(step, ws, x, backend="ray", ray_mesh=mesh4, **kw)
    assert on_ray.verify.bitwise and [o.tobytes() for o in on_ray.outputs] == [o.tobytes() for o in local.outputs]
    assert on_ray.comm.total_bytes == local.comm.total_bytes > 0


def test_a_data_dependent_while_loop_runs_on_the_actors(mesh4):
    """Every actor tests the (all-reduced) condition itself: they agree on the trip count."""
    x, w = ss.exact_inputs([(8, 4), (4, 4)], seed=0, max_abs=2)

    def grow(x, w):
        return ss.lax.while_loop(lambda c: np.sum(np.abs(c[0])) < 1000.0, lambda c: (c[0] @ w + 1.0, c[1] + 1),
                                 (x, np.int32(0)))

    kw = dict(mesh=ss.Mesh({"x": 4}), in_shardings=(P("x", None), P()))
    local, on_ray = ss.run(grow, x, w, backend="local", **kw), ss.run(grow, x, w, backend="ray", ray_mesh=mesh4, **kw)
    assert on_ray.verify.bitwise and int(on_ray.outputs[1]) == int(local.outputs[1]) > 1
    assert on_ray.outputs[0].tobytes() == local.outputs[0].tobytes()


def test_a_placement_only_layout_runs_on_ray(mesh8):
    """[S(0), S(0)] of 10 rows over 2x4 (2,2,1,0 | 2,2,1,0) as a program value on Ray devices."""
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    f = lambda a: a * 2.0 - 1.0  # noqa: E731
    compiled = mesh8.compile(f, x, in_shardings="[S(0), S(0)]", out_shardings="[S(0), S(0)]")
    res = compiled(x)
    assert np.array_equal(res.outputs, f(x)) and not res.records
    assert [len(res.shards(d)[0]) for d in range(8)] == [2, 2, 1, 0, 2, 2, 1, 0]
