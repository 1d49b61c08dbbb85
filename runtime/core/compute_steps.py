"""How an executor runs a ``Compute`` instruction: ``OPS[op].kernel(*inputs, **params)`` on the
device's buffers, on the loop's thread (``run_compute``) or, for a heavy contraction on a device
sharing its process with others, on a thread of the process's ``KernelThreads``
(``run_compute_threaded``, ``kernel_threads.py``), the same bits either way.

``ComputeSteps`` is the part of ``Executor`` (``executor.py``) that runs kernels: it reads and
writes the executor's buffers through the executor's own methods (``_read``, ``_write``,
``_fail``), as the rest of the class does.
"""

from __future__ import annotations

import numpy as np

from simshard.ops.dynamic import update_into
from simshard.ops.registry import OPS
from simshard.spmd import updates_in_place

from ..errors import ExecutionError
from .diagnosis import aval


class ComputeSteps:
    """The compute instruction's steps of an ``Executor`` (module docstring)."""

    kernels = None  # the process's KernelThreads, where its devices' heavy kernels run at once

    def run_compute(self, ins) -> None:
        ready = self._operands(ins)
        if ready is not None:
            op, args = ready
            self._store(ins, self._kernel(op, args, ins))

    async def run_compute_threaded(self, ins) -> None:
        """``run_compute``, a heavy contraction run on a thread of the process's ``KernelThreads``
        while the loop goes on with its other devices."""
        ready = self._operands(ins)
        if ready is None:
            return
        op, args = ready
        if not self.kernels.wants(ins.op, args, ins.params):
            self._store(ins, self._kernel(op, args, ins))
            return
        try:
            outs = await self.kernels.run(op.kernel, args, dict(ins.params))
        except Exception as e:
            raise self._kernel_failed(e, args) from e
        self._store(ins, outs)

    def _operands(self, ins):
        """A compute's op and operands, or None where it was done in place (a scan writing its
        stacked output: the update lands in the held buffer, no new bytes, as on a device)."""
        op = OPS.get(ins.op)
        if op is None:
            raise self._fail(ExecutionError, f"device {self.device} {self.where()}: no op named {ins.op!r} in the registry")
        if op.region_only:
            raise self._fail(
                ExecutionError,
                f"device {self.device} {self.where()}: {ins.op} runs only inside a manual region; a schedule "
                "must express it with collective instructions",
            )
        args = [self._read(b) for b in ins.inputs]
        if updates_in_place(ins) and self._owns(ins.inputs[0], args[0]):
            update_into(*args)
            return None
        return op, args

    def _kernel(self, op, args, ins):
        try:
            return op.kernel(*args, **dict(ins.params))
        except Exception as e:
            raise self._kernel_failed(e, args) from e

    def _kernel_failed(self, e: Exception, args) -> ExecutionError:
        shapes = ", ".join(aval(np.asarray(a)) for a in args)
        return self._fail(ExecutionError, f"device {self.device} {self.where()} on ({shapes}): {type(e).__name__}: {e}")

    def _store(self, ins, outs) -> None:
        """Write a kernel's results to the instruction's output buffers."""
        if not isinstance(outs, (tuple, list)) or len(outs) != len(ins.outputs):
            got = f"{len(outs)} results" if isinstance(outs, (tuple, list)) else type(outs).__name__
            raise self._fail(
                ExecutionError,
                f"device {self.device} {self.where()}: kernel returned {got} for {len(ins.outputs)} output buffers",
            )
        if updates_in_place(ins):  # the kernel copied (a buffer numpy shares): still an in-place update
            self.buffers[ins.outputs[0]] = np.asarray(outs[0])
            return
        self._write(list(zip(ins.outputs, outs)))

    def _owns(self, buf: int, x: np.ndarray) -> bool:
        """Whether buffer ``buf``'s array ``x`` may be written in place: its own memory, writable,
        held under no other buffer number (an identity copy shares its array), and not waiting
        for a peer to read it from this process's memory (``Transport.lends``)."""
        return (x.flags.writeable and x.base is None
                and not any(a is x for b, a in self.buffers.items() if b != buf)
                and not self.transport.lends(x))
