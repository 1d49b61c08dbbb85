"""The heavy kernels of a process's devices, run at once on threads of their own.

Devices that share a process run as tasks of one event loop: left on the loop's thread, their
kernels run one after another, so a process of four devices computes on one core where four
processes of one device compute on four, and its devices' products form one chain that stalls
whenever the process loses its core (measured on this 2-core machine, loaded: in a Megatron MLP
512x1024x4096 step on 4 devices per process, each process ran its 8 products back to back and
the two finished 113 and 160 ms into the step; docs/performance.md). ``KernelThreads`` runs a
device's contraction on one of the process's threads instead, one thread per device: numpy's
matmul lets go of the interpreter lock for the whole product, so the process's devices compute
as many at once as separate processes would, while the loop goes on with its other devices'
messages.

Only contractions of at least ``MIN_FLOPS`` go to a thread: a hand-off costs a wakeup of the
loop when the kernel ends (measured with asyncio's loop and uvloop's: a median 24 to 36 us on
this machine), which a short kernel would not win back. Every kernel runs with one BLAS thread
(``simshard.ops.threads``), on whichever thread it runs: the same bits either way.

While a kernel is out on a thread the process's loop stops polling (``on_busy`` / ``on_idle``,
given by the device host): a polling loop would take from the kernels the core it spins on.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Sequence

import numpy as np

from simshard.report.compute import op_work

# a contraction of fewer FLOPs runs on the loop's thread: 5e7 FLOPs take about 0.5 ms at the
# 107 GFLOP/s one core's float32 matmul reached here (256x1024 @ 1024x1024 in 5.0 ms, one BLAS
# thread), ten times the hand-off's 24 to 36 us (the module docstring)
MIN_FLOPS = 50_000_000
# at most this many threads per process (a process may hold hundreds of devices): numpy's OpenBLAS
# keeps a fixed pool of buffers for the threads calling it at once (its build says MAX_THREADS=64,
# two buffers each), and threads beyond the cores only share them
MAX_THREADS = 32


def contraction_flops(op: str, args: Sequence[np.ndarray], params: Mapping) -> int:
    """The FLOPs of a contraction (``dot_general``) on these operands, 0 for any other op."""
    if op != "dot_general" or len(args) < 2:
        return 0
    shapes = [np.shape(a) for a in args]
    work = op_work(op, shapes, (), params, "", 0, 0)
    batch, m, n, k = work.gemm
    return 2 * batch * m * n * k


class KernelThreads:
    """One thread per device of a process (up to ``MAX_THREADS``), for its heavy kernels (module
    docstring). ``on_busy`` is called when a kernel goes out while none was, ``on_idle`` when the
    last one comes back."""

    def __init__(self, threads: int, on_busy: Callable[[], None] = lambda: None,
                 on_idle: Callable[[], None] = lambda: None, min_flops: int = MIN_FLOPS):
        self.threads = max(1, min(threads, MAX_THREADS))
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="simshard-kernel")
        self.on_busy, self.on_idle = on_busy, on_idle
        self.min_flops = min_flops
        self.out = 0  # kernels on threads now

    def wants(self, op: str, args: Sequence[np.ndarray], params) -> bool:
        """Whether ``op`` on ``args`` is worth a thread (a contraction of ``min_flops`` or more)."""
        return contraction_flops(op, args, dict(params)) >= self.min_flops

    async def run(self, kernel: Callable, args: Sequence[np.ndarray], params: Mapping):
        """``kernel(*args, **params)`` on a thread of the pool, awaited."""
        if self.out == 0:
            self.on_busy()
        self.out += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: kernel(*args, **params))
        finally:
            self.out -= 1
            if self.out == 0:
                self.on_idle()

    def close(self) -> None:
        self.pool.shutdown(wait=False)


_SHARED: list[KernelThreads] = []  # the process's one pool for the local backend (``shared_kernel_threads``)
_SHARED_LOCK = threading.Lock()


def shared_kernel_threads() -> KernelThreads:
    """This process's ``KernelThreads`` for the local backend, made on first use and kept for its
    later runs (a pool made per run would start its threads again each time): a thread per core
    this process may run on (up to ``MAX_THREADS``), since all of a run's devices share them and
    threads beyond the cores only take turns. Measured on this 2-core machine (loaded), the Megatron
    MLP 512x1024x4096 on 8 local devices: best step 106 ms with the threads against 126 ms on the
    loop's thread alone, the same bits (docs/performance.md)."""
    with _SHARED_LOCK:
        if not _SHARED:
            try:
                cores = len(os.sched_getaffinity(0))
            except AttributeError:  # not Linux
                cores = os.cpu_count() or 1
            _SHARED.append(KernelThreads(cores))
        return _SHARED[0]
