"""Devices sharing a process compute at once (``runtime/core/kernel_threads.py``): a heavy
contraction goes to a thread of the process's ``KernelThreads``, so two devices' products run at
the same time instead of one after the other, with the same bits as on the loop's thread; a
kernel failing there is named as any other; the loop is told when kernels go out and come back."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from simshard.ops.threads import one_blas_thread
from simshard.runtime import ExecutionError
from simshard.runtime.core.executor import Executor
from simshard.runtime.core.kernel_threads import MIN_FLOPS, KernelThreads, contraction_flops
from simshard.runtime.local.in_memory import InMemoryTransport
from simshard.spmd import Compute, Schedule

MATMUL = (("contracting", ((1,), (0,))), ("batch", ((), ())))


def matmul_schedule(device: int) -> Schedule:
    """``b2 = b0 @ b1``, then ``b3 = b2 @ b1``."""
    return Schedule(device, (0, 1), (Compute(1, "%1 dot_general", "dot_general", (0, 1), (2,), MATMUL),
                                     Compute(2, "%2 dot_general", "dot_general", (2, 1), (3,), MATMUL)), (3,))


def run_devices(inputs: dict, kernels: KernelThreads | None) -> tuple[dict, dict]:
    """Each device's outputs and timeline, all devices as tasks of one loop (as a host runs them)."""

    async def main():
        t = InMemoryTransport(tuple(inputs), timeout=5.0)
        exs = [Executor(matmul_schedule(d), t, kernels=kernels) for d in inputs]
        outs = await asyncio.gather(*(e.run(inputs[e.device]) for e in exs))
        return {e.device: o for e, o in zip(exs, outs)}, {e.device: e.timeline for e in exs}

    with one_blas_thread():
        return asyncio.run(main())


def gaussian_inputs(devices=(0, 1), n: int = 384) -> dict:
    rng = np.random.default_rng(7)
    return {d: [rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)]
            for d in devices}


def overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


def test_a_contractions_flops_decide_whether_it_goes_to_a_thread():
    a, b = np.zeros((256, 1024), np.float32), np.zeros((1024, 512), np.float32)
    assert contraction_flops("dot_general", [a, b], dict(MATMUL)) == 2 * 256 * 1024 * 512
    batched = (("contracting", ((2,), (1,))), ("batch", ((0,), (0,))))
    assert contraction_flops("dot_general", [np.zeros((3, 4, 5)), np.zeros((3, 5, 6))], dict(batched)) == 2 * 3 * 4 * 6 * 5
    assert contraction_flops("add", [a, a], {}) == 0  # element-wise kernels stay on the loop's thread
    kernels = KernelThreads(2)
    try:
        assert kernels.wants("dot_general", [a, b], MATMUL)  # 268 MFLOP
        assert not kernels.wants("dot_general", [a[:16], b[:, :16]], MATMUL)  # 0.5 MFLOP < MIN_FLOPS
        assert 2 * 16 * 1024 * 16 < MIN_FLOPS <= 2 * 256 * 1024 * 512
    finally:
        kernels.close()


def test_two_devices_of_a_process_compute_at_once_with_the_same_bits():
    """With kernel threads two devices' products overlap in time (each device's first product is
    still running when the other's starts); on the loop's thread they never do. The bits are
    the same either way (Gaussian inputs: any other summation order would show)."""
    inputs = gaussian_inputs()
    changes = []
    kernels = KernelThreads(2, on_busy=lambda: changes.append("busy"), on_idle=lambda: changes.append("idle"),
                            min_flops=0)
    try:
        threaded, threaded_times = run_devices(inputs, kernels)
    finally:
        kernels.close()
    inline, inline_times = run_devices(inputs, None)
    for d in inputs:
        assert threaded[d][0].tobytes() == inline[d][0].tobytes(), d
    first = [threaded_times[d][0] for d in inputs]
    assert overlap(*first), first
    assert not any(overlap(a, b) for a in inline_times[0] for b in inline_times[1])
    # the loop is told once when kernels go out and once when the last is back, per stretch of work
    assert changes and changes[0] == "busy" and changes[-1] == "idle"
    assert all(a != b for a, b in zip(changes, changes[1:]))


def test_kernels_run_on_as_many_threads_as_devices():
    """Two kernels that can only finish together (each waits for the other at a barrier) finish:
    the process's devices really do compute at the same time."""
    barrier = threading.Barrier(2, timeout=10.0)

    def kernel(x):
        barrier.wait()
        return (x,)

    async def main(kernels):
        return await asyncio.gather(kernels.run(kernel, [1], {}), kernels.run(kernel, [2], {}))

    kernels = KernelThreads(2)
    try:
        assert asyncio.run(main(kernels)) == [(1,), (2,)]
    finally:
        kernels.close()


def test_a_kernel_failing_on_a_thread_names_the_device_and_operands():
    inputs = {0: [np.zeros((4, 5), np.float32), np.zeros((4, 5), np.float32)]}  # 5 != 4: no product
    kernels = KernelThreads(1, min_flops=0)
    try:
        with pytest.raises(ExecutionError, match=r"device 0 at position 0 .*dot_general.* on \(float32\[4, 5\], float32\[4, 5\]\)"):
            run_devices(inputs, kernels)
    finally:
        kernels.close()


def test_the_local_backend_runs_its_devices_products_at_once_on_one_shared_pool():
    """The local backend uses the same mechanism as a Ray process of several devices: its devices'
    heavy products overlap in time, on the process's one pool of kernel threads (a thread per core,
    kept from run to run), with the bits of the loop's thread."""
    import os

    from simshard.runtime import run_local
    from simshard.runtime.core.kernel_threads import shared_kernel_threads
    from simshard.spmd import SpmdProgram

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: a pool of one thread runs the products one after another")
    inputs = gaussian_inputs()
    spmd = SpmdProgram(None, tuple(matmul_schedule(d) for d in inputs), (), ())
    ran = run_local(spmd, inputs)
    inline, _ = run_devices(inputs, None)
    for d in inputs:
        assert ran.outputs[d][0].tobytes() == inline[d][0].tobytes(), d
    assert overlap(*(ran.timeline[d][0] for d in inputs)), ran.timeline
    assert shared_kernel_threads() is shared_kernel_threads()
    assert shared_kernel_threads().threads == min(len(os.sched_getaffinity(0)), 32)
