"""Polling that steps aside when another task wants its core (``runtime/wire/preemption.py``): the
record of a thread's waits for its core and its pauses, the scheduler's statistics it reads, and
the two polling loops (a wrapped selector's, a ``Spinner``'s) stopping for a pause and polling
again after."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from simshard.runtime.wire import polling, preemption
from simshard.runtime.wire.preemption import (BACKOFF_MAX, BACKOFF_MIN, LOOK_SECONDS, NEVER, PREEMPTION_SECONDS,
                                              WAITED_LIMIT, WINDOW, StepAside)


class Scheduler:
    """A fake clock and a thread's time waited for its core, moved by the test."""

    def __init__(self):
        self.now, self.total = 100.0, 0.0

    def clock(self) -> float:
        return self.now

    def waited(self) -> float:
        return self.total

    def wait(self, seconds: float, after: float = 0.0) -> None:
        """The thread kept off its core ``seconds``, ``after`` seconds on (and the reading
        interval, so the next look reads it)."""
        self.now += after + LOOK_SECONDS
        self.total += seconds


def test_moments_off_the_core_are_no_contention_and_a_slice_is():
    s = Scheduler()
    aside = StepAside(s.clock, s.waited)
    assert aside.may_poll() and aside.may_poll()
    for _ in range(5):  # another thread's moments on the core (Ray's, a kernel worker's)
        s.wait(WAITED_LIMIT / 10, after=WINDOW / 10)
        assert aside.may_poll()
    assert aside.times == 0
    s.wait(WAITED_LIMIT / 2, after=WINDOW * 2)  # long after: the moments before are out of the window
    assert aside.may_poll() and aside.times == 0
    s.wait(WAITED_LIMIT / 2, after=WINDOW / 4)  # within the window, the limit reached: a task wants the core
    assert not aside.may_poll()
    assert aside.times == 1 and aside.pause == BACKOFF_MIN and aside.left() == pytest.approx(BACKOFF_MIN)
    s.now += BACKOFF_MIN / 2
    assert not aside.may_poll() and aside.left() == pytest.approx(BACKOFF_MIN / 2)  # the pause lasts
    s.now = aside.until
    assert aside.may_poll() and aside.left() == 0.0  # over, and nobody took the core meanwhile
    s.wait(WAITED_LIMIT * 2, after=WINDOW / 2)  # a busy task's whole slice at once
    assert not aside.may_poll() and aside.times == 2


def test_pauses_double_while_contention_lasts_up_to_the_longest_and_start_short_again():
    s = Scheduler()
    aside = StepAside(s.clock, s.waited)
    pauses = []
    for _ in range(10):  # each time the pause ends, the core is taken again at once
        aside.may_poll()
        s.wait(WAITED_LIMIT)
        assert not aside.may_poll()
        pauses.append(aside.pause)
        s.now = aside.until
    assert pauses[:3] == [BACKOFF_MIN, 2 * BACKOFF_MIN, 4 * BACKOFF_MIN]
    assert pauses[-1] == BACKOFF_MAX and max(pauses) == BACKOFF_MAX
    s.now += 2 * BACKOFF_MAX + 1.0  # quiet for longer than the last pause: contention over
    aside.may_poll()
    s.wait(WAITED_LIMIT)
    assert not aside.may_poll() and aside.pause == BACKOFF_MIN


def test_the_delay_of_waking_from_a_sleep_is_not_counted():
    """A thread that slept in wait (between runs, through a pause, while its kernels computed)
    waits for a core as it wakes: the scheduler's delay, and on a virtual machine the idle core's
    own wake-up (milliseconds when the host is busy). Not polling's: not contention."""
    s = Scheduler()
    aside = StepAside(s.clock, s.waited)
    aside.may_poll()
    aside.slept()
    s.wait(WAITED_LIMIT * 5)  # woken late
    assert aside.may_poll() and aside.times == 0  # the wake-up's delay: taken as it is
    s.wait(WAITED_LIMIT * 2)  # then kept off its core while it polls
    assert not aside.may_poll() and aside.times == 1
    s.wait(WAITED_LIMIT * 5, after=aside.left())  # woken from the pause's sleep, late
    assert aside.may_poll() and aside.times == 1
    s.wait(WAITED_LIMIT / 2)
    aside.forget()  # the run's kernels had the cores: nothing before counts
    s.wait(WAITED_LIMIT * 3)
    assert aside.may_poll()
    s.wait(WAITED_LIMIT / 2, after=WINDOW / 10)
    assert aside.may_poll() and aside.times == 1


def test_where_only_preemptions_are_counted_two_close_together_are_contention(monkeypatch):
    count = [0]
    monkeypatch.setattr(preemption, "involuntary_switches", lambda: count[0])
    s = Scheduler()
    aside = StepAside(s.clock, preemption.preemptions_waited)
    assert PREEMPTION_SECONDS * 2 >= WAITED_LIMIT > PREEMPTION_SECONDS
    for after, poll in ((1.0, True), (WINDOW * 2, True), (WINDOW / 2, False)):  # alone, alone, a second close by
        s.now += after + LOOK_SECONDS
        count[0] += 1
        assert aside.may_poll() is poll


def test_the_environment_can_keep_polling_from_stepping_aside(monkeypatch):
    monkeypatch.delenv(preemption.ENV, raising=False)
    mine = preemption.step_aside()
    assert mine is preemption.step_aside() and mine is not NEVER  # one per thread, kept
    other = []
    t = threading.Thread(target=lambda: other.append(preemption.step_aside()))
    t.start()
    t.join()
    assert other[0] is not mine  # another thread's count is its own
    monkeypatch.setenv(preemption.ENV, "0")
    assert preemption.step_aside() is NEVER
    assert all(NEVER.may_poll() for _ in range(3)) and NEVER.times == 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs a CPU affinity to share a core (Linux)")
def test_a_thread_that_shares_its_core_with_a_busy_process_is_seen_to_wait_for_it():
    """The time read is the scheduler's: this thread polling and a busy process on one core, and
    within a few windows the thread has waited past the limit in one of them (the busy process's
    slices), and steps aside."""
    core = min(os.sched_getaffinity(0))
    mask = os.sched_getaffinity(0)
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # (the busy process pinned and running)
        aside, waited = StepAside(), preemption.run_delay_reader()
        before, until = waited(), time.monotonic() + 0.5
        while time.monotonic() < until and aside.may_poll():
            pass
        assert waited() - before >= WAITED_LIMIT and aside.times == 1
    finally:
        os.sched_setaffinity(0, mask)
        busy.kill()
        busy.wait()


def faked(monkeypatch) -> tuple[Scheduler, StepAside]:
    """The polling loops' time waited for a core, moved by the test (real time: the pauses are
    waited out)."""
    s = Scheduler()
    aside = StepAside(waited=s.waited)
    monkeypatch.setattr(polling, "step_aside", lambda: aside)
    return s, aside


def on_a_spinner(kind: str, monkeypatch, body):
    """``body(scheduler, aside, spinner, rings)`` run on a new loop of ``kind`` with a ``Spinner``
    whose time waited the test moves and whose turns it counts; what it returns."""
    from runtime_helpers import CountedRings, new_loop

    s, aside = faked(monkeypatch)
    loop = new_loop(kind)
    rings = CountedRings()
    spinner = polling.Spinner(loop, rings=rings)
    try:
        return loop.run_until_complete(body(s, aside, spinner, rings))
    finally:
        spinner.stop()
        loop.close()


def contend(s: Scheduler, aside: StepAside) -> None:
    """A moment off the core, seen (as a polling loop's every turn sees it), then a slice."""
    time.sleep(LOOK_SECONDS)
    s.total += WAITED_LIMIT / 4
    assert aside.may_poll()  # a moment: no pause
    time.sleep(LOOK_SECONDS)
    s.total += WAITED_LIMIT


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_a_spinner_stops_turning_while_its_core_is_wanted_and_turns_again_after_the_pause(kind, monkeypatch):
    async def run(s, aside, spinner, rings):
        spinner.hold()
        await asyncio.sleep(0.005)
        turning = rings.turns
        contend(s, aside)
        await asyncio.sleep(0.001)
        stopped = rings.turns
        await asyncio.sleep(BACKOFF_MIN / 2)  # within the pause: not a turn
        within = rings.turns - stopped
        await asyncio.sleep(BACKOFF_MIN)  # the pause over: turning again while the run is held
        return turning, within, rings.turns - stopped, aside.times, spinner.turning

    turning, within, after, times, still = on_a_spinner(kind, monkeypatch, run)
    assert turning > 10 and within == 0 and after > 10 and times == 1 and still, (turning, within, after, times)


def test_a_polling_selector_sleeps_at_once_while_its_core_is_wanted(monkeypatch):
    """What the wrapped selector asks: once it has seen contention (within ``LOOK_SECONDS``), the
    wait's select blocks for the rest of the wait, where without it the loop polls for the whole
    spin first (50 ms here: ``test_busy_poll``)."""
    s, aside = faked(monkeypatch)
    loop = asyncio.new_event_loop()
    original = loop._selector.select
    asked = []  # (when, timeout) of each select

    def recorded(timeout=None):
        asked.append((time.monotonic(), timeout))
        return original(timeout)

    loop._selector.select = recorded
    try:
        assert polling.busy_poll(loop, 0.05)

        async def wait():
            asked.clear()
            contend(s, aside)
            start = time.monotonic()
            await asyncio.sleep(0.1)
            return start

        start = loop.run_until_complete(wait())
        slept = [(when - start, timeout) for when, timeout in asked if timeout != 0]
        assert slept and slept[0][0] < 0.01 and slept[0][1] > 0.05, asked  # asleep at once, for the rest
        assert aside.times == 1
    finally:
        polling.busy_poll(loop, 0.0)
        loop.close()


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_waits_while_the_processs_kernels_compute_are_no_contention(kind, monkeypatch):
    """The run's own kernel threads, woken beside the loop's, may keep it off its core while they
    compute (the loop does not poll then): forgotten when they are back, so the loop turns on."""

    async def run(s, aside, spinner, rings):
        spinner.hold()
        await asyncio.sleep(0.002)
        time.sleep(LOOK_SECONDS)
        s.total += WAITED_LIMIT / 2
        assert aside.may_poll()  # a moment, seen as the kernels go out
        spinner.pause(True)  # kernels out
        s.total += WAITED_LIMIT  # (past the limit within the window: contention, were it counted)
        spinner.pause(False)  # back
        turns = rings.turns
        await asyncio.sleep(0.005)
        return rings.turns - turns, aside.times

    after, times = on_a_spinner(kind, monkeypatch, run)
    assert after > 10 and times == 0, (after, times)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs a CPU affinity to share a core (Linux)")
def test_a_run_whose_processes_stepped_aside_says_so_and_keeps_its_bits(ray_session):
    """Two polling device processes pinned to one core with a busy process: each is preempted
    every scheduler slice while it polls, steps aside, and the run says so (``Execution``, its
    routes in words); its bits are the local backend's all the same."""
    from simshard.runtime import run_local
    from simshard.runtime.ray.driver.mesh import RayMesh
    from simshard.spmd import CollectivePermute, Schedule, SpmdProgram

    from runtime_helpers import bits

    ids, hops = (0, 1), 100
    spmd = SpmdProgram(None, tuple(Schedule(d, (0,), tuple(
        CollectivePermute(k + 1, f"%{k} permute", src=k, dst=k + 1, pairs=((k % 2, 1 - k % 2),), shape=(4,),
                          dtype="float32", axes=("x",)) for k in range(hops)), (hops,)) for d in ids), (), ())
    inputs = {d: [np.arange(4, dtype=np.float32) * (d + 1)] for d in ids}
    core = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        with RayMesh(devices=ids, devices_per_process=1, busy_poll=True) as mesh:
            for d in ids:
                os.sched_setaffinity(mesh.pid(d), {core})
            runs, got = [], []
            while len(runs) < 5 and not any(r.stepped_aside for r in runs):  # (the first nearly always does)
                runs.append(mesh.run_spmd(spmd, inputs))
                got.append({d: bits(runs[-1].outputs[d][0]) for d in ids})  # (read while the mesh holds them)
    finally:
        busy.kill()
        busy.wait()
    local = run_local(spmd, inputs)
    assert all(g == {d: bits(local.outputs[d][0]) for d in ids} for g in got)
    aside = [r for r in runs if r.stepped_aside]
    assert aside, [r.describe_routes() for r in runs]
    assert all(re.search(rf"; polling stepped aside {r.stepped_aside} times \(another task wanted the cores\)$",
                         r.describe_routes()) for r in aside), [r.describe_routes() for r in aside]
