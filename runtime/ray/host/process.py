"""A device process's settings for the memory it allocates and the collector that scans it,
chosen once when the process starts (``DeviceHost.__init__``)."""

from __future__ import annotations

import ctypes
import gc


def quiet_gc() -> None:
    """A worker process's heap holds Ray's and simshard's long-lived objects, which every full
    collection scans again: freeze them (they are never garbage) and collect the young generation
    less often, since a run allocates many short-lived objects and few cycles. (Measured on a
    chain of two-device messages: about 124 -> 99 us per message, with the collector the most
    expensive thing a Ray worker did per message; ``gc_policy`` says more.)"""
    from ...core.gc_policy import RUN_THRESHOLD  # after bootstrap (see __init__)

    gc.freeze()
    gc.set_threshold(*RUN_THRESHOLD)


def keep_freed_pages() -> None:
    """Keep the memory of freed arrays up to 32 MiB in the process for the next ones (glibc's
    malloc): by default it returns each such block to the kernel, and the next array of its size
    gets fresh pages, which cost a fault each (several times a copy of them on this kind of
    machine). A device process allocates and frees the same sizes every run (a collective's output,
    a message's body): measured on the 64 MiB all-to-all on 8 processes, about 10% of its CPU. A
    C library without ``mallopt`` keeps its own policy."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: give memory back only past 256 MiB free at the top
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks up to 32 MiB (glibc's largest) from the heap
