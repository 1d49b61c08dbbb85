"""Kernels run with one BLAS thread, wherever they run.

A multi-threaded BLAS splits a contraction by its thread count, so ``a @ b`` on Gaussian float32
inputs gives other bits with 2 threads than with 1 (tens of thousands of elements of a 512x1024
by 1024x4096 product on this kind of machine). The local backend runs every device in one process
and a Ray device actor runs one device per process: with the thread count pinned to 1 in both, and
in the driver's reference run, a kernel's bits depend on its inputs only.
"""

from __future__ import annotations

import contextlib

from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def one_blas_thread():
    """Within the block, BLAS (OpenBLAS, MKL, BLIS) runs on one thread in this process."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def pin_one_blas_thread() -> None:
    """For the rest of this process (a device worker): BLAS on one thread."""
    threadpool_limits(limits=1, user_api="blas")
