"""Shared by the runtime tests: run collectives on many devices over one in-memory transport."""

from __future__ import annotations

import asyncio
import functools

import numpy as np

from simshard.sharding.reduce_ops import REDUCE_OPS
from simshard.runtime.core.collectives import Channel
from simshard.runtime.local.in_memory import InMemoryTransport
from simshard.runtime.core.mailbox import Mailbox
from simshard.runtime.core.transport import Transport
from simshard.runtime.wire.frame_rings import RingReaders


def run_devices(devices, body, timeout=5.0):
    """``body(ch) -> coroutine`` on every device (one Channel each, instruction id 0); returns
    ({device: result}, transport)."""

    async def main():
        t = InMemoryTransport(devices, timeout=timeout)
        chans = {d: Channel(t, d, 0, tag=("test",)) for d in devices}
        results = await asyncio.gather(*(body(chans[d]) for d in devices))
        for d in devices:
            t.finished(d)
        return dict(zip(devices, results)), t

    return asyncio.run(main())


def floats(rng, shape, dtype=np.float32):
    """Non-exact values over a wide range: a different summation order would change the bits."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, size=shape)).astype(dtype)


def uneven_blocks(rng, group, axis):
    """A [2, 3, 2] float block per device, its ``axis`` 0-3 long (uneven, possibly empty)."""
    xs = {}
    for d in group:
        shape = [2, 3, 2]
        shape[axis] = int(rng.integers(0, 4))
        xs[d] = floats(rng, shape)
    return xs


def fold(parts, op):
    """The reference reduction: a plain left fold in the order given (then avg's divide)."""
    combine = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    acc = functools.reduce(combine, parts[1:], np.array(parts[0], copy=True))
    if op == "avg":
        acc = acc / len(parts)
    return np.asarray(acc, dtype=np.asarray(parts[0]).dtype)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, a.tobytes()


def same_bits(a, b) -> bool:
    return bits(a) == bits(b)


class BlindTransport(Transport):
    """A transport with no global view (like one Ray actor's): mailboxes and timeouts only, no
    deadlock detection."""

    def __init__(self, devices, timeout):
        super().__init__(timeout)
        self.boxes = {d: Mailbox(d) for d in devices}

    def _deliver(self, msg):
        self.boxes[msg.dst].put(msg)

    async def _collect(self, dst, src, key, timeout):
        return await self.boxes[dst].get(src, key, timeout)


assert REDUCE_OPS  # the reference above must cover every reduce op the runtime knows


def kill(mesh, device: int, within: float = 30.0) -> None:
    """Kill ``device``'s process and wait until the mesh sees it gone and the process has ended:
    ``ray.kill`` returns at once, the process can still answer a ping meanwhile, and Ray may call
    the actor dead while its process still answers on its control line (a fetch from it then
    succeeds)."""
    import time

    import ray

    from simshard.runtime.ray.reaper import running  # ray only where a test kills a Ray device

    pid = mesh.pid(device)
    ray.kill(mesh.actors[device])
    deadline = time.monotonic() + within
    while device not in mesh.lost(timeout=1.0) or running(pid):
        assert time.monotonic() < deadline, f"device {device}'s process still answers {within:g} s after ray.kill"
        time.sleep(0.05)



# The event loops Ray may run a device process's actor on: asyncio's own, and uvloop's wherever
# uvloop is installed (Ray's default then). The wire must work on both.
EVENT_LOOPS = ("asyncio", "uvloop")


class CountedRings(RingReaders):
    """No rings to read, but each turn of a ``Spinner`` counted (a turn drains its rings)."""

    def __init__(self):
        super().__init__()
        self.turns = 0

    def drain(self) -> bool:
        self.turns += 1
        return super().drain()


# a Ray mesh's processes whose polling never steps aside (``wire/preemption``: the
# ``never_step_aside`` fixture's, for the driver)
NEVER_STEP_ASIDE = {"env_vars": {"SIMSHARD_STEP_ASIDE": "0"}}


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop of ``kind`` (the test is skipped where uvloop is not installed)."""
    if kind == "uvloop":
        import pytest

        return pytest.importorskip("uvloop").new_event_loop()
    return asyncio.new_event_loop()


def run_on(kind: str, coro):
    """``asyncio.run(coro)`` on a loop of ``kind``."""
    with asyncio.Runner(loop_factory=lambda: new_loop(kind)) as runner:
        return runner.run(coro)
