"""How a device's messages reach its peers on a RayMesh, on whichever event loop Ray gives the
device processes (uvloop's wherever uvloop is installed, asyncio's otherwise): by socket on both,
polling on both, the routes in every run's ``Execution``, and a peer reached by Ray calls instead
is a warning naming the devices and why, never silent."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import simshard as ss  # noqa: E402
from simshard.runtime import run_local  # noqa: E402
from simshard.runtime.ray.driver.connected import SocketFallbackWarning  # noqa: E402
from simshard.runtime.ray.driver.lines import ControlFallbackWarning  # noqa: E402
from simshard.runtime.ray.driver.mesh import RayMesh  # noqa: E402
from test_ray import MESH, bits, every_collective  # noqa: E402

# Ray runs an async actor on uvloop when it can import it, unless RAY_USE_UVLOOP is 0: the
# "asyncio" case hides uvloop from the device processes whether or not it is installed.
HIDE_UVLOOP = {"env_vars": {"RAY_USE_UVLOOP": "0"}}
MESH4 = ss.Mesh({"x": 4})  # (2 processes of 2 devices)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_messages_go_by_socket_and_the_loop_polls_on_either_event_loop(ray_session, loop):
    if loop == "uvloop":
        pytest.importorskip("uvloop")  # CI installs it (the dev extra): this case must run there
    from test_kernel_threads import gaussian_inputs, matmul_schedule

    from simshard.spmd import SpmdProgram

    matmuls = SpmdProgram(None, tuple(matmul_schedule(d) for d in range(8)), (), ())
    spmd = every_collective(cols=6)
    rng = np.random.default_rng(11)
    inputs = {d: [rng.standard_normal((8, 6)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SocketFallbackWarning)
        warnings.simplefilter("error", ControlFallbackWarning)
        with RayMesh(MESH, devices_per_process=4, busy_poll=True,
                     runtime_env=HIDE_UVLOOP if loop == "asyncio" else None) as devices:
            assert devices.routes(0) == {1: "process", 2: "process", 3: "process", 4: "unix", 5: "unix",
                                         6: "unix", 7: "unix"}
            assert devices.polling(0) == ("turns" if loop == "uvloop" else "selector")
            assert devices.event_loop(0) == devices.event_loop(7) == loop  # (what peers.py prints with each row)
            remote = devices.run_spmd(spmd, inputs)
            outputs = dict(remote.outputs)
            products = devices.run_spmd(matmuls, gaussian_inputs(range(8)), timeout=60.0)
            product_outputs = dict(products.outputs)
    assert remote.routes == {"process": 24, "unix": 32}  # ordered pairs of the 8 devices
    # heavy products on the process's kernel threads, the loop pausing its polling meanwhile
    # (by turns on uvloop, its selector's on asyncio's): the bits of local, all at once
    for d, expected in run_local(matmuls, gaussian_inputs(range(8))).outputs.items():
        assert bits(product_outputs[d][0]) == bits(expected[0]), d
    for group in ((0, 1, 2, 3), (4, 5, 6, 7)):
        first = [products.timeline[d][0] for d in group]
        assert max(s.start for s in first) < min(s.end for s in first)
    assert (remote.data_plane, remote.control_plane) == ("sockets", "sockets")
    for d in spmd.devices:
        assert [bits(a) for a in outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert remote.records == local.records


def test_a_peer_reached_by_ray_calls_instead_of_its_socket_is_a_warning_naming_the_devices(ray_session):
    with RayMesh(MESH4, devices_per_process=2) as devices:
        # every process told that the others sit on another node, at a TCP port nothing listens on
        devices.sockets = {d: ("another node", addr, "tcp:127.0.0.1:1") for d, (_, addr, _) in devices.sockets.items()}
        with pytest.warns(SocketFallbackWarning) as caught:
            devices.connect((), None)
        said = sorted(str(w.message) for w in caught)
        for mine, theirs in (("0, 1", "2, 3"), ("2, 3", "0, 1")):  # one warning per process, naming both ends
            assert any(re.match(rf"devices \[{mine}\] reach devices \[{theirs}\] by Ray calls, not by the socket "
                                rf"to their process \(tcp:127\.0\.0\.1:1\): the socket to a peer process did not "
                                rf"open: .*(refused|failed)", text) for text in said), said
        assert devices.routes(0) == {1: "process", 2: "ray", 3: "ray"}
        x = np.arange(16.0).reshape(4, 4)
        remote = devices.compile(lambda a: a.sum(0), x, in_shardings=(ss.P("x", None),))(x)
        assert remote.execution.routes == {"process": 4, "ray": 8}  # ordered pairs of the 4 devices
        # and the messages that crossed between the processes were sent as Ray calls, counted as sent
        assert remote.execution.messages.get("ray", 0) > 0 and set(remote.execution.messages) <= {"process", "ray"}


def test_a_control_line_that_does_not_open_is_a_warning_naming_the_devices(ray_session):
    with RayMesh(MESH4, devices_per_process=2) as devices:
        with pytest.warns(ControlFallbackWarning, match=r"devices \[0, 1\] did not open"):
            devices.lines.open((0, 1), "\0simshard-control-nobody-listens-here", 1.0)


def test_devices_of_other_nodes_talk_by_tcp_with_every_frame_authenticated(ray_session):
    """Every process told that the others are on another node: their messages go on TCP (on
    loopback here), every frame with its MAC (``wire/frame_auth.py``), and the run is exact."""
    with RayMesh(MESH4, devices_per_process=2) as devices:
        devices.sockets = {d: ("another node", addr, tcp) for d, (_, addr, tcp) in devices.sockets.items()}
        devices.connect((), None)
        assert devices.routes(0) == {1: "process", 2: "tcp", 3: "tcp"}
        x = np.arange(64.0).reshape(8, 8)
        w = np.arange(64.0).reshape(8, 8) % 5
        step = devices.compile(lambda a, b: a @ b, x, w, in_shardings=(ss.P(None, "x"), ss.P("x", None)))
        res = step(x, w)
        assert np.array_equal(np.asarray(res.outputs[0] if isinstance(res.outputs, tuple) else res.outputs), x @ w)
        assert res.execution.routes == {"process": 4, "tcp": 8}
        assert res.execution.messages.get("tcp", 0) > 0 and set(res.execution.messages) <= {"process", "tcp"}


def test_large_inputs_send_the_run_calls_by_ray_and_the_messages_still_by_socket(ray_session):
    """One device per process, an all-reduce of 1 MiB inputs (peers.py's collectives rows): the
    driver's run calls go as Ray calls, saying why (the shards travel in Ray's object store), while
    every message between the devices goes on the Unix socket, counted as each is sent; with small
    inputs the run calls go on the control lines. Bits equal to the local backend's either way."""
    from simshard.runtime.ray.driver.lines import WhyRayCalls
    from simshard.spmd import AllReduce, Schedule, SpmdProgram

    ids = (0, 1)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SocketFallbackWarning)
        with RayMesh(devices=ids, devices_per_process=1) as devices:
            for rows, plane, reason in ((1024, "ray", WhyRayCalls.LARGE_INPUTS.value), (16, "sockets", None)):
                spmd = SpmdProgram(None, tuple(Schedule(d, (0,), (AllReduce(1, "%1 ar", src=0, dst=1, group=ids,
                                                                            axes=("x",)),), (1,)) for d in ids), (), ())
                inputs = {d: [rng.standard_normal((rows, 256)).astype(np.float32)] for d in ids}
                local = run_local(spmd, inputs)
                res = devices.run_spmd(spmd, inputs)
                sent = sum(1 for t in local.transfers.rows if t[2] == "sent" and t[0] != t[1])
                assert (res.control_plane, res.control_reason) == (plane, reason), rows
                # every message on the Unix socket, or its ring of frames where the two ends poll
                assert res.routes == {"unix": 2} and set(res.messages) <= {"unix", "unix ring"}, res.messages
                assert sum(res.messages.values()) == sent and sent > 0, res.messages
                # (where the processes poll, another task may have had them step aside: said last)
                said = re.sub(r"; polling stepped aside \d+ times \(another task wanted the cores\)$", "",
                              res.describe_routes())
                taken = ", ".join(f"{r} {n}" for r, n in sorted(res.messages.items()))  # ("unix" before "unix ring")
                assert said.startswith(f"messages between devices: {taken} (device pairs: unix 2); run calls: "), said
                if reason:
                    assert said.endswith(f"Ray actor calls ({reason})"), said
                else:  # (by ring only where the processes poll: a node with a core for each)
                    assert re.search(r"the driver's control lines \([0-2] of 2 calls, [0-2] answers by ring\)$", said), said
                for d in ids:
                    assert bits(res.outputs[d][0]) == bits(local.outputs[d][0]), (rows, d)
