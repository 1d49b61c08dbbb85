"""Busy-polling a device process's event loop while a message is due.

A device waiting for a message sleeps in the event loop's ``select``; the message's arrival then
costs a wakeup on both sides: the sender's write wakes a sleeping process (on a virtual machine an
interrupt between cores, tens of microseconds) and the receiver is scheduled in again. Where every
process of the node has a core of its own, a waiting loop can afford to poll instead: it asks the
selector without blocking until something is ready or ``SPIN_SECONDS`` have passed, and only then
sleeps. (MPI libraries do the same, and yield instead when the node is oversubscribed; so does
this: ``should_spin``; and a polling loop whose core another task wants after all, a job beside
the mesh, steps aside for a while: ``preemption``.) Nothing else changes: the same events, in the
same order.

A loop with no selector to wrap (uvloop's, which Ray runs actors on wherever uvloop is installed:
its polling is libuv's, in C) polls by turns instead (``Spinner``): while a run is in progress one
callback is always ready, so each turn of the loop asks the kernel for events without blocking
and never sleeps; once the run ends the loop sleeps as before.

A polling thread gives up the interpreter lock only for each non-blocking ``select``, and takes it
straight back: another thread of the process that wants it (Ray's, handing the loop an actor call)
would wait for the interpreter's switch interval, 5 ms by default. While it polls, the process
switches every ``SWITCH_SECONDS`` instead.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from .frame_rings import RingReaders
from .preemption import step_aside

SPIN_SECONDS = 1e-3  # how long a waiting loop polls before it sleeps (a few message round trips)
SWITCH_SECONDS = 5e-5  # the interpreter's switch interval while a loop polls
_SWITCH = sys.getswitchinterval()  # the process's own, restored when polling stops
# the longest the driver polls for one answer (``answer_spin``): the interpreter's default switch
# interval, the longest a thread that wants the lock may wait for it from any running thread anyway
ANSWER_SPIN_MAX = 5e-3


def cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def should_spin(processes_here: int) -> bool:
    """Whether a device process polls for its messages: where each of the node's
    ``processes_here`` device processes has a core of its own. On a shared core a polling process
    takes the time its neighbour needs to send; on its own core it takes only what would idle, and
    where another task wants the core after all (the driver, Ray's processes, a job beside the
    mesh) it steps aside (``preemption``). Measured on this 2-core machine, 2 device processes:
    one message in flight 43-45 us polling against 112-129 us not (docs/performance.md,
    "2026-11-28, thirteenth")."""
    return processes_here <= cores()


def driver_should_spin(processes_here: int) -> bool:
    """Whether the driver polls for its answers: only where a core is left over beside the
    node's ``processes_here`` device processes, so that it never takes the core of a device that
    polls (measured on this 2-core machine, 2 device processes of one device each and the driver
    polling too, loaded by other jobs, a Megatron MLP step: median 10.6 ms polling, 2.8 ms not,
    docs/performance.md, seventh session)."""
    return processes_here < cores()


def answer_spin(base: float, last_run: float | None) -> float:
    """Seconds the driver polls for each answer of a run before it sleeps: none where ``base``
    is 0 (its processes do not poll, or no core is left over for it: ``driver_should_spin``);
    else enough to cover a run as long as the program's last (``last_run`` seconds, None before
    its first), half as long again, at least ``base`` and at most ``ANSWER_SPIN_MAX``. A step of a millisecond or two
    (a small model's) then has its first answer come while the driver still polls, instead of a
    wakeup after ``base``; a long one pays one wakeup, as it did."""
    if base <= 0:
        return 0.0
    return min(ANSWER_SPIN_MAX, max(base, 1.5 * (last_run or 0.0)))


def busy_poll(loop: asyncio.AbstractEventLoop, spin: float, rings: RingReaders | None = None) -> bool:
    """Make ``loop`` poll for up to ``spin`` seconds before each sleep in its selector (0: sleep
    at once, as it did), reading ``rings`` (its peers' rings of frames: ``frame_rings``) as it
    polls and saying it sleeps before it does. False where the loop has no selector to wrap (not
    a selector loop)."""
    selector = getattr(loop, "_selector", None)
    if selector is None:
        return False
    select = getattr(selector.select, "sleeping", selector.select)  # installed before: the original
    rings = RingReaders() if rings is None else rings  # (none: an empty set of them)
    if spin <= 0:
        selector.select = select
        rings.sleep()
        sys.setswitchinterval(_SWITCH)
        return True
    sys.setswitchinterval(min(_SWITCH, SWITCH_SECONDS))
    aside = step_aside()  # (the loop's thread's)
    clock, look, may_poll = time.monotonic, rings.drain, aside.may_poll

    def polling(timeout: float | None = None):
        rings.wake()
        events = select(0)
        if look() or events or (timeout is not None and timeout <= 0):
            return events
        start = clock()
        until = start + (spin if timeout is None else min(spin, timeout))
        while clock() < until and may_poll():  # (not while another task wants the core: ``preemption``)
            events = select(0)
            if look() or events:
                return events
        if rings.sleep():  # a frame came as it was about to sleep
            return []
        events = select(None if timeout is None else max(0.0, timeout - (clock() - start)))
        aside.slept()
        return events

    polling.sleeping = select
    selector.select = polling  # the loop calls self._selector.select(timeout) on every turn
    return True


def pause_polling(loop: asyncio.AbstractEventLoop, paused: bool, rings: RingReaders | None = None) -> None:
    """Stop a selector loop's polling (``busy_poll``) while ``paused`` (the process's own threads
    compute, on the cores it would spin on) and start it again after; the short switch interval
    stays, so a thread handing back its result does not wait 5 ms for the interpreter lock."""
    busy_poll(loop, 0.0 if paused else SPIN_SECONDS, rings)
    sys.setswitchinterval(min(_SWITCH, SWITCH_SECONDS))
    if not paused:
        step_aside().forget()  # (the kernels' threads took the cores meanwhile: no contention)


class Spinner:
    """Busy-polling for a loop with no selector to wrap: while ``hold`` is in effect (a run in
    progress; holds nest) and for ``linger`` seconds after the last hold is released, a callback
    reschedules itself on every turn, so the loop polls for events without blocking instead of
    sleeping; the switch interval is ``SWITCH_SECONDS`` from its start to its ``stop``, as
    ``busy_poll``'s. (The loop tells no callback when it is about to sleep, so it polls for the
    whole run rather than ``SPIN_SECONDS`` before each sleep; the linger after a run is the same
    ``SPIN_SECONDS`` that ``busy_poll``'s loop polls before it sleeps, so that a training loop's
    next run call, a few hundred microseconds after its last answer, finds this loop polling on
    either kind of loop, with no wakeup to pay.)"""

    def __init__(self, loop: asyncio.AbstractEventLoop, linger: float = SPIN_SECONDS,
                 rings: RingReaders | None = None):
        self.loop, self.held, self.linger = loop, 0, linger
        # its peers' rings of frames, read on every turn (``frame_rings``; none: an empty set of them)
        self.rings = RingReaders() if rings is None else rings
        self.until = 0.0  # (monotonic) when polling stops once nothing is held
        self.turning = False  # whether the callback is scheduled (one at a time)
        self.paused = False  # the process's own threads compute: no turns meanwhile (``pause``)
        self.aside = step_aside()  # the loop's thread's preemptions (made in it)
        self.resume: asyncio.TimerHandle | None = None  # turning again once a pause is over
        # for as long as the process polls, as ``busy_poll``'s: set only between runs, the loop
        # thread would wait up to 5 ms for the lock after each system call that releases it (the
        # run's answer written to the driver), behind Ray's threads
        sys.setswitchinterval(min(_SWITCH, SWITCH_SECONDS))

    def hold(self) -> None:
        self.held += 1
        self._start()

    def release(self) -> None:
        self.held = max(0, self.held - 1)
        if not self.held:
            self.until = time.monotonic() + self.linger

    def pause(self, paused: bool) -> None:
        """No turns while ``paused`` (the process's threads compute on the cores the loop would
        spin on); turning again after, where a run is still held."""
        self.paused = paused
        if not paused:
            self.aside.forget()  # (the kernels' threads took the cores meanwhile: no contention)
        self._start()

    def stop(self) -> None:
        """Polling off: the process's own switch interval again (a run in progress stops turning)."""
        self.held, self.until = 0, 0.0
        if self.resume is not None:
            self.resume.cancel()
            self.resume = None
        rings, self.rings = self.rings, RingReaders()  # (a turn still due must not touch them: a new spinner may)
        rings.sleep()
        sys.setswitchinterval(_SWITCH)

    def polling(self) -> bool:
        """Whether the loop should poll now: a run held, or the linger after one not over, and its
        core not wanted by another task (``preemption``: when it is, the loop sleeps in wait until
        the pause is over, and turns again then where a run is still held)."""
        if self.paused or not (self.held > 0 or time.monotonic() < self.until):
            return False
        if self.aside.may_poll():
            return True
        if self.held and self.resume is None:
            self.resume = self.loop.call_later(self.aside.left(), self._resume)
        return False

    def _resume(self) -> None:
        self.resume = None
        self._start()

    def _start(self) -> None:
        if self.turning:
            return
        self.aside.slept()  # (not polling until now: the loop slept; its wake-up's delay is no contention)
        if self.polling():
            self.turning = True
            self.rings.wake()
            self.loop.call_soon(self._turn)

    def _turn(self) -> None:
        self.rings.drain()
        self.turning = self.polling()
        if self.turning:
            self.loop.call_soon(self._turn)
        else:
            self.rings.sleep()  # (what it finds is handed on: its receivers are woken by the loop as ever)
