"""Polling that steps aside when it is in another's way.

A thread that polls (a device process's event loop, the driver waiting for answers) takes a
whole core. That is free where the core would idle, and harmful where another task wants it: a
job beside the mesh, Ray's own processes, the driver on a node whose every core a device process
holds. The scheduler says which: a polling thread never gives its core up of itself, so any time
it spends runnable but off its core (its *run delay*, Linux's ``/proc/thread-self/schedstat``)
is time another task took the core from it. A polling thread that has waited ``WAITED_LIMIT``
seconds in all within ``WINDOW`` stops polling for a while (``BACKOFF_MIN`` seconds, doubled for
each pause that follows the last within as long again, up to ``BACKOFF_MAX``), sleeping in wait
as an unpolled loop does, and tries again after. Under lasting contention it then polls for one
moment a second, which costs the other task one scheduler slice (a few milliseconds) a second.

The time waited tells a busy task beside the mesh (the scheduler gives it a whole slice: a
millisecond or more waited at once) from the moments the machine's other threads take a core
(Ray's own threads, a kernel worker: tens of microseconds each), which a polling loop can afford
(docs/performance.md, "2026-11-28, thirteenth": counting each such moment as contention, two
within ``WINDOW`` as the twelfth session did, kept two polling device processes on two cores
stepped aside for most of a run, at the unpolled hop's 100 to 200 us instead of 35 to 45 us).
Where the OS keeps no run delay per thread, each involuntary context switch (``ru_nivcsw``, a
preemption) counts as ``PREEMPTION_SECONDS`` waited: two within ``WINDOW`` are contention.

Measured on a 2-core machine with one busy process beside two device processes, polling forced
on (``benchmarks/machine_costs.py --polling --beside 1``): one message in flight 2.7 ms without
stepping aside against 80 us unpolled, 77 to 98 us with it (docs/performance.md).
"""

from __future__ import annotations

import collections
import os
import resource
import threading
import time
import weakref
from typing import Callable

BACKOFF_MIN = 0.01  # seconds without polling after contention (about a scheduler slice or two)
BACKOFF_MAX = 1.0  # the longest pause: under lasting contention, one try a second
WINDOW = 0.05  # seconds over which the time waited for a core is summed
# contention: this long waited for a core within ``WINDOW`` (2% of it). A busy task's slice is a
# millisecond or more (Linux's EEVDF base slice, 0.75 ms x (1 + log2 cores), cores up to 8);
# another thread's moment on the core, tens of microseconds
WAITED_LIMIT = 1e-3
PREEMPTION_SECONDS = WAITED_LIMIT / 2  # a preemption's worth where only their count is kept
LOOK_SECONDS = 1e-4  # the time waited read at most this often (contention seen within this of its end)

# the calling thread's counts where the OS keeps them per thread (Linux), else the process's
_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: time on a core, time waiting for one (ns), slices


def involuntary_switches() -> int:
    """How often the scheduler has taken this thread off its core for another task (Linux: this
    thread's count; elsewhere the process's)."""
    return resource.getrusage(_WHO).ru_nivcsw


def preemptions_waited() -> float:
    """Seconds this thread has waited for a core, where only its preemptions are counted: each
    taken as ``PREEMPTION_SECONDS``."""
    return involuntary_switches() * PREEMPTION_SECONDS


def run_delay_reader() -> Callable[[], float]:
    """A function giving the seconds the calling thread has so far waited, runnable, for a core
    (its scheduler statistics' run delay: the file is opened here, in the thread, and read with
    one ``pread`` per call, about two microseconds with its parse), or ``preemptions_waited``
    where the OS keeps no such statistics."""
    try:
        fd = os.open(SCHEDSTAT, os.O_RDONLY)
    except OSError:
        return preemptions_waited

    def waited() -> float:
        return int(os.pread(fd, 128, 0).split()[1]) * 1e-9

    try:
        waited()  # (the file's form is the one read)
    except (OSError, ValueError, IndexError):
        os.close(fd)
        return preemptions_waited
    weakref.finalize(waited, os.close, fd)  # (the thread's record goes with the thread)
    return waited


class StepAside:
    """One polling thread's record of its waits for a core: whether it may poll now
    (``may_poll``), and how often it has stepped aside (``times``). ``clock`` and ``waited`` are
    the monotonic clock and the thread's seconds waited so far (``run_delay_reader``'s, made in the
    polling thread), given otherwise only by tests."""

    def __init__(self, clock=time.monotonic, waited: Callable[[], float] | None = None):
        self.clock = clock
        self.waited = run_delay_reader() if waited is None else waited
        # the time waited when last looked at (None: take the next as it is)
        self.seen: float | None = self.waited()
        # (when seen, seconds waited) for each wait seen within the last ``WINDOW``
        self.recent: collections.deque[tuple[float, float]] = collections.deque()
        self.until = 0.0  # (clock) when the current pause ends
        self.pausing = False  # a pause begun and not yet seen over
        self.looked = -LOOK_SECONDS  # (clock) when the time waited was last read
        self.pause = BACKOFF_MIN  # the current pause's length
        self.times = 0  # pauses begun

    def may_poll(self) -> bool:
        """False during a pause, and where the thread has waited ``WAITED_LIMIT`` for its core
        within ``WINDOW`` (a pause then begins: doubled where it follows the last within as long
        again, else the shortest); True otherwise. Reads the time waited at most every
        ``LOOK_SECONDS``."""
        now = self.clock()
        if now < self.until:
            return False
        if self.pausing:  # (the thread slept through the pause)
            self.pausing, self.seen = False, None
        if now - self.looked < LOOK_SECONDS:  # (a polling loop asks on every turn: a read each would slow it)
            return True
        self.looked = now
        waited = self.waited()
        seen, self.seen = self.seen, waited
        if seen is None or waited <= seen:  # (None: ``forget``, counted from here)
            return True
        recent = self.recent
        recent.append((now, waited - seen))
        while recent[0][0] < now - WINDOW:
            recent.popleft()
        if sum(w for _, w in recent) < WAITED_LIMIT:  # moments: another thread's, a kernel worker's
            return True
        recent.clear()
        self.pause = min(2 * self.pause, BACKOFF_MAX) if now < self.until + self.pause else BACKOFF_MIN
        self.until = now + self.pause
        self.pausing = True
        self.times += 1
        return False

    def slept(self) -> None:
        """The thread slept in wait (it stopped polling): the delay of its wake-up (the
        scheduler's, and on a virtual machine the idle core's own, which the run delay counts
        alike) is not polling's, and is not counted. No read here: the time waited is taken as it
        is at the next look."""
        self.seen = None

    def forget(self) -> None:
        """Count no wait before now: the process's own threads had its cores meanwhile (a run's
        kernels, handed their work by this thread and woken beside it), by design. The time
        waited is taken as it is at the next look (no read here: this is on each kernel's return)."""
        self.slept()
        self.recent.clear()

    def left(self) -> float:
        """Seconds until the current pause ends (0 where none lasts)."""
        return max(0.0, self.until - self.clock())


_threads = threading.local()
NEVER = StepAside(waited=lambda: 0.0)  # polling that never steps aside (it never waits)
# ``SIMSHARD_STEP_ASIDE=0`` in a process's environment: its polling never steps aside (for a
# test that asserts what polling does on a loaded machine, or a comparison)
ENV = "SIMSHARD_STEP_ASIDE"


def step_aside() -> StepAside:
    """The calling thread's ``StepAside`` (the waits it reads are the thread's own), or ``NEVER``
    where ``SIMSHARD_STEP_ASIDE=0``."""
    if os.environ.get(ENV) == "0":
        return NEVER
    aside = getattr(_threads, "aside", None)
    if aside is None:
        aside = _threads.aside = StepAside()
    return aside
