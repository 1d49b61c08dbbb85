"""Polling that steps aside when it is in another's way.

A thread that polls (a device process's event loop, the driver waiting for answers) takes a
whole core. That is free where the core would idle, and harmful where another task wants it: a
job beside the mesh, Ray's own processes, the driver on a node whose every core a device process
holds. The scheduler says which: it preempts a running thread (an *involuntary* context switch,
``ru_nivcsw``) only for a task that wants its core, and a thread that polls never gives its
core up of itself. So a polling thread that finds it has been preempted twice within ``WINDOW``
seconds stops polling for a while (``BACKOFF_MIN`` seconds, doubled for each pause that follows
the last within as long again, up to ``BACKOFF_MAX``), sleeping in wait as an unpolled loop does,
and tries again after. (One preemption alone is a kernel thread's moment on the core, a few times
a second even where a core idles.) Under lasting contention it then polls for one moment a
second, which costs a preemption's delay (a scheduler slice, a few milliseconds) once a second.

Measured on a 2-core machine with one busy process beside two device processes, polling forced
on (``benchmarks/machine_costs.py --polling --beside 1``): one message in flight 2.7 ms without
stepping aside against 80 us unpolled, 77 to 98 us with it; the pair's Megatron step 14.0 ms
against 2.6 ms, 1.6 to 2.3 ms with it (docs/performance.md, "2026-11-28, twelfth").
"""

from __future__ import annotations

import os
import resource
import threading
import time

BACKOFF_MIN = 0.01  # seconds without polling after a preemption (about a scheduler slice or two)
BACKOFF_MAX = 1.0  # the longest pause: under lasting contention, one try a second
# two preemptions seen within this many seconds are contention; one alone is not (each core's
# kernel threads take it for a moment a few times a second: seen here with a core left idle)
WINDOW = 0.05
LOOK_SECONDS = 1e-4  # the count read at most this often (a preemption is seen within this of its end)

# the calling thread's counts where the OS keeps them per thread (Linux), else the process's
_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def involuntary_switches() -> int:
    """How often the scheduler has taken this thread off its core for another task (Linux: this
    thread's count; elsewhere the process's)."""
    return resource.getrusage(_WHO).ru_nivcsw


class StepAside:
    """One polling thread's record of its preemptions: whether it may poll now (``may_poll``),
    and how often it has stepped aside (``times``). ``clock`` and ``switches`` are the monotonic
    clock and ``involuntary_switches``, given otherwise only by tests."""

    def __init__(self, clock=time.monotonic, switches=involuntary_switches):
        self.clock, self.switches = clock, switches
        self.seen: int | None = switches()  # the count when last looked at (None: take the next as it is)
        self.until = 0.0  # (clock) when the current pause ends
        self.last = -WINDOW  # (clock) when a preemption was last seen
        self.looked = -LOOK_SECONDS  # (clock) when the count was last read
        self.pause = BACKOFF_MIN  # the current pause's length
        self.times = 0  # pauses begun

    def may_poll(self) -> bool:
        """False during a pause, and where the thread is seen preempted within ``WINDOW`` of the
        last time it was (a pause then begins: doubled where it follows the last within as long
        again, else the shortest); True otherwise. Reads the count (a system call, about a
        microsecond) at most every ``LOOK_SECONDS``."""
        now = self.clock()
        if now < self.until:
            return False
        if now - self.looked < LOOK_SECONDS:  # (a polling loop asks on every turn: a system call each would slow it)
            return True
        self.looked = now
        count = self.switches()
        if count == self.seen:
            return True
        seen, self.seen = self.seen, count
        if seen is None:  # (``forget``: counted from here)
            return True
        last, self.last = self.last, now
        if now - last > WINDOW:  # a lone preemption: a kernel thread's moment on this core, say
            return True
        self.pause = min(2 * self.pause, BACKOFF_MAX) if now < self.until + self.pause else BACKOFF_MIN
        self.until = now + self.pause
        self.times += 1
        return False

    def forget(self) -> None:
        """Count no preemption before now: the process's own threads had its cores meanwhile (a
        run's kernels, handed their work by this thread and woken beside it), by design. The count
        is taken as it is at the next look (no system call here: this is on each kernel's return)."""
        self.seen = None

    def left(self) -> float:
        """Seconds until the current pause ends (0 where none lasts)."""
        return max(0.0, self.until - self.clock())


_threads = threading.local()
NEVER = StepAside(switches=lambda: 0)  # polling that never steps aside (its count never moves)
# ``SIMSHARD_STEP_ASIDE=0`` in a process's environment: its polling never steps aside, as before
# this module (for a test that asserts what polling does on a loaded machine, or a comparison)
ENV = "SIMSHARD_STEP_ASIDE"


def step_aside() -> StepAside:
    """The calling thread's ``StepAside`` (the counts it reads are the thread's own), or ``NEVER``
    where ``SIMSHARD_STEP_ASIDE=0``."""
    if os.environ.get(ENV) == "0":
        return NEVER
    aside = getattr(_threads, "aside", None)
    if aside is None:
        aside = _threads.aside = StepAside()
    return aside
