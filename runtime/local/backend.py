"""The local backend: every device's Schedule as an asyncio task in one event loop.

``run_local(spmd, inputs)`` runs an ``SpmdProgram`` given each device's local input shards and
returns an ``Execution`` (per-device outputs, communication records, memory report, transfer log).
The devices exchange data through an ``InMemoryTransport`` with the same collective code the Ray
backend uses, and run their heavy contractions at once on the process's kernel threads, as the
devices sharing a Ray process do (``core/kernel_threads.py``: one mechanism; the same bits). Nothing hangs: every receive has a timeout, and since the in-memory transport sees
every device it reports a deadlock (or a wait on a device that has finished) the moment it
happens, naming each device and the instruction it was at.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Mapping, Sequence

import numpy as np

from simshard.ops.threads import one_blas_thread
from simshard.spmd import SpmdProgram
from simshard.report.memory import MemoryReport, capacity_of

from ..core.execution import Execution, check_inputs
from ..core.executor import Executor
from ..core.kernel_threads import shared_kernel_threads
from ..core.gc_policy import fewer_collections
from ..errors import ExecutionError, ScheduleMismatchError
from .in_memory import InMemoryTransport


async def execute_local(spmd: SpmdProgram, inputs: Mapping[int, Sequence[np.ndarray]], device_memory=None,
                        timeout: float | None = 10.0, algorithm: str = "direct",
                        trace_values: bool = False) -> Execution:
    """``run_local`` inside a running event loop."""
    check_inputs(spmd, inputs)
    transport = InMemoryTransport(spmd.devices, timeout=timeout)
    executors: dict[int, Executor] = {}
    kernels = shared_kernel_threads()
    for s in spmd.schedules:
        executors[s.device] = Executor(
            s, transport, capacity=capacity_of(device_memory, s.device), algorithm=algorithm,
            describe_peer=lambda d: executors[d].where() if d in executors else "not in this program",
            trace=spmd.checkpoint_buffers if trace_values else frozenset(), kernels=kernels,
        )
    # as in a device actor: the bits of a kernel do not depend on the backend, and the collector
    # does not pass over the whole heap every few hundred messages
    with one_blas_thread(), fewer_collections():
        tasks = {d: asyncio.create_task(ex.run(list(inputs[d])), name=f"device {d}") for d, ex in executors.items()}
        try:
            done, pending = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for t in tasks.values():
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            transport.close()
    failed = {d: t.exception() for d, t in tasks.items() if not t.cancelled() and t.exception() is not None}
    if failed:
        raise _root_cause(failed)
    leftover = transport.undelivered()
    if leftover:
        m = leftover[0]
        raise ScheduleMismatchError(
            f"schedules do not match: device {m.src} sent message {m.key} (instruction id {m.key[0]}, sent {m.note}) "
            f"to device {m.dst}, which finished without receiving it ({len(leftover)} message(s) left undelivered)",
            devices=(m.src, m.dst), positions={m.src: m.note, m.dst: executors[m.dst].where()},
        )
    outputs = {d: tasks[d].result() for d in spmd.devices}
    ran = {d: tuple(executors[d].ran) for d in spmd.devices}
    memory = MemoryReport(tuple(executors[d].memory() for d in spmd.devices))
    values = {d: dict(executors[d].traced) for d in spmd.devices} if trace_values else {}
    timeline = {d: tuple(executors[d].timeline) for d in spmd.devices}
    return Execution(spmd, outputs, ran, memory, transport.log, values, timeline)


def _root_cause(failed: dict[int, BaseException]) -> BaseException:
    """A device's own failure (an out-of-memory, a kernel error) before the mismatches it caused in
    its peers; then the lowest device."""
    own = {d: e for d, e in failed.items() if not isinstance(e, ScheduleMismatchError)}
    pick = own or failed
    return pick[min(pick)]


def run_local(spmd: SpmdProgram, inputs: Mapping[int, Sequence[np.ndarray]], device_memory=None,
              timeout: float | None = 10.0, algorithm: str = "direct", trace_values: bool = False) -> Execution:
    """Run every device's schedule of ``spmd`` in one process.

    ``inputs``: device -> its local input shards, in the order of the schedule's ``inputs``
    (``placement.shard_inputs`` builds them from global arrays). ``device_memory``: None, a byte
    capacity for every device, or device -> bytes; exceeding it raises
    ``DeviceOutOfMemoryError``. ``timeout``: seconds any receive may wait for a peer.
    ``trace_values``: keep a copy of every checkpoint buffer (``spmd.checkpoints``) as first
    written, in ``Execution.values``, for op-by-op verification (off by default: it holds every
    op's result).
    Errors: ``ExecutionError`` and its subclasses, each naming device and instruction.
    """
    coro = execute_local(spmd, inputs, device_memory=device_memory, timeout=timeout, algorithm=algorithm,
                         trace_values=trace_values)
    try:
        asyncio.get_running_loop()
        in_loop = True
    except RuntimeError:
        in_loop = False
    if not in_loop:  # outside the except block: a failure of the run does not chain "no running event loop"
        return asyncio.run(coro)
    # Called from inside a running loop (a notebook, an async caller): run in a fresh thread.
    box: dict = {}

    def target():
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    th = threading.Thread(target=target, name="simshard-local")
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


__all__ = ["Execution", "ExecutionError", "execute_local", "run_local"]
