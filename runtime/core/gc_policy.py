"""The garbage collector's thresholds while devices run.

A run allocates many short-lived objects per message (futures, messages, coroutine frames) and
keeps a few per instruction (its record, its span, a row per transfer), but makes few reference
cycles. At Python's default thresholds the young generation is collected every 700 allocations,
and the full collections that follow every hundred or so of those pass over the whole heap (the
schedules, the records so far, whatever else the process holds): on a chain of 20,000 two-device
messages, four full collections took a third of the run (46 against 32 us per message). Device
hosts keep ``RUN_THRESHOLD`` for good (``ray/host/process.quiet_gc``); the local backend raises the
thresholds to it for the length of a run (``fewer_collections``).
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

RUN_THRESHOLD = (10_000, 50, 50)  # the young generation collected every 10,000 allocations, the others rarely

_lock = threading.Lock()
_runs = 0  # runs in progress (threads may run several at once): the last one restores
_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections():
    """Raise the collector's thresholds to at least ``RUN_THRESHOLD`` while the block runs (the
    process's own thresholds come back when the last such block ends; a threshold of 0, the
    collector switched off, stays 0)."""
    global _runs, _saved
    with _lock:
        if _runs == 0:
            _saved = gc.get_threshold()
            if _saved[0] != 0:
                gc.set_threshold(*(max(mine, run) for mine, run in zip(_saved, RUN_THRESHOLD)))
        _runs += 1
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0:
                gc.set_threshold(*_saved)
