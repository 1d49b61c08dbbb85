"""A device process that is alive but answers nothing (stopped by SIGSTOP, as a process stuck in a
system call, a debugger or a deadlocked C extension would be) ends every wait of the driver in an
error naming the device, within the timeout and a probe's wait: a run, a fetch of outputs, a load; and
``retries=`` restarts it as it restarts a dead one. A process that computes for longer than the
timeout is not mistaken for one."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import numpy as np
import pytest

pytest.importorskip("ray")

import simshard as ss  # noqa: E402
from simshard import P  # noqa: E402
from simshard.runtime import DeviceLostError  # noqa: E402
from simshard.runtime.ray.driver.mesh import RayMesh  # noqa: E402
from simshard.runtime.ray.driver.probe import PROBE_SECONDS  # noqa: E402

MESH = ss.Mesh({"x": 2})
X = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
TIMEOUT = 1.0


STOP_SECONDS = 30.0  # the most a stop may take to reach every thread of a process (a loaded machine)

# reading a process's threads' states needs Linux's /proc
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="waits for a stop in /proc")


def thread_states(pid: int) -> list[str]:
    """The state letter of each thread of process ``pid`` (``T``: stopped), from /proc."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    return states


def wait_stopped(pid: int) -> None:
    """Return once every thread of ``pid`` is stopped. ``kill(SIGSTOP)`` returns before that: the
    kernel wakes one thread, which stops the others only once it is scheduled, and meanwhile the
    others run on (measured on this loaded 2-core machine: up to ~20 ms, long enough for a
    process to answer a small run sent at once, so the run ended without an error)."""
    deadline = time.monotonic() + STOP_SECONDS
    while not all(s in "Tt" for s in thread_states(pid)):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} not stopped {STOP_SECONDS:g} s after SIGSTOP: {thread_states(pid)}")
        time.sleep(0.001)


@contextlib.contextmanager
def stopped(devices: RayMesh, device: int):
    """``device``'s process stopped (SIGSTOP, every thread of it) for the block, then let go (or
    gone, if restarted)."""
    pid = devices.pid(device)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_stopped(pid)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def double(a):
    return a * 2


def test_a_run_on_a_stopped_process_ends_naming_it(ray_session):
    with RayMesh(MESH, devices_per_process=1) as devices:
        compiled = devices.compile(double, X, in_shardings=(P("x", None),), timeout=TIMEOUT)
        assert np.array_equal(compiled(X).outputs, X * 2)
        with stopped(devices, 1):
            start = time.monotonic()
            with pytest.raises(DeviceLostError, match="device 1 stopped answering during the run") as err:
                compiled(X)
            assert time.monotonic() - start < 2 * TIMEOUT + PROBE_SECONDS + 3
        assert err.value.device == 1 and err.value.lost == (1,)


def test_retries_restart_a_stopped_process_and_run_bitwise(ray_session):
    with RayMesh(MESH, devices_per_process=1) as devices:
        compiled = devices.compile(double, X, in_shardings=(P("x", None),), timeout=TIMEOUT)
        with stopped(devices, 0):
            res = compiled(X, retries=1)
        assert res.execution.attempts == 2 and res.execution.restarted == (0,)
        assert np.array_equal(res.outputs, X * 2)


def test_fetching_outputs_from_a_stopped_process_ends_naming_it(ray_session):
    with RayMesh(MESH, devices_per_process=1, patience=TIMEOUT) as devices:
        compiled = devices.compile(double, X, in_shardings=(P("x", None),), timeout=TIMEOUT)
        res = compiled(X)
        with stopped(devices, 1):
            start = time.monotonic()
            with pytest.raises(DeviceLostError, match="device 1: the process does not answer .fetching"):
                res.shards(1)
            assert time.monotonic() - start < 2 * TIMEOUT + PROBE_SECONDS + 3


def test_loading_on_a_stopped_process_ends_naming_it(ray_session):
    with RayMesh(MESH, devices_per_process=1) as devices:
        devices.compile(double, X, in_shardings=(P("x", None),), timeout=TIMEOUT)  # started and warm
        with stopped(devices, 0):
            start = time.monotonic()
            with pytest.raises(DeviceLostError, match="device 0: the process does not answer .loading"):
                devices.compile(double, X, in_shardings=(P("x", None),), timeout=TIMEOUT)
            assert time.monotonic() - start < 2 * TIMEOUT + PROBE_SECONDS + 3


def test_a_device_computing_longer_than_the_timeout_is_not_taken_for_lost(ray_session):
    a = np.ones((2, 1600, 1600), np.float32)

    def slow(a):  # a few matmuls, each far longer than the timeout below on a loaded machine
        for _ in range(8):
            a = np.tanh(a @ a / 1600)
        return a

    with RayMesh(MESH, devices_per_process=1) as devices:
        compiled = devices.compile(slow, a, in_shardings=(P("x", None, None),), timeout=0.05)
        start = time.monotonic()
        res = compiled(a)
        took = time.monotonic() - start
        assert took > 0.5, f"the run took {took:.2f} s: too fast to show anything"
        assert res.execution.attempts == 1 and res.outputs.shape == a.shape
        assert res.controller_calls.get("probe", 0) > 0  # the devices were probed while they computed


def test_a_device_array_whose_process_died_names_the_device(ray_session):
    """One path, one error: an array left on the devices, read after its process died, is the same
    ``DeviceLostError`` naming the device as ``res.outputs`` gives (not the control line's own
    ConnectionError)."""
    from runtime_helpers import kill

    with RayMesh(MESH, devices_per_process=1) as devices:
        compiled = devices.compile(double, X, in_shardings=(P("x", None),), timeout=TIMEOUT)
        arr = compiled(X).arrays
        kill(devices, 1)
        with pytest.raises(DeviceLostError, match="device 1's Ray actor died after the run") as err:
            np.asarray(arr)
        assert err.value.device == 1
