"""The control line's rings of frames (``runtime/wire/control_line.py``, ``control_server.py``): a
run call goes by the driver's ring while the host's loop polls and an answer by the host's while
the driver's wait polls; either end asleep, the socket carries it; a reader that fell asleep
after the writer looked is woken by the doorbell; a frame too large for a ring goes on the
socket; an answer to a call given up on is dropped; a host that dies is still seen dead by a
polling wait. Without Ray: a ``ControlServer``
on an event loop in a thread."""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time

import numpy as np
import pytest

from simshard.runtime.wire import control_line, frame_rings
from simshard.runtime.wire.control_line import ControlLine, OutcomeKind, Request
from simshard.runtime.wire.control_server import ControlServer
from simshard.runtime.wire.frame_rings import LARGEST, RingReaders, rings_possible
from simshard.runtime.wire.polling import Spinner, busy_poll
from simshard.runtime.wire.shared_memory import remove_shared, shared_memory_prefix
from runtime_helpers import EVENT_LOOPS, new_loop

pytestmark = [pytest.mark.skipif(not rings_possible(),
                                 reason="rings of frames are made on x86-64 with shared memory only"),
              pytest.mark.usefixtures("never_step_aside")]  # (what goes by ring while the ends poll)


class RingHost:
    """A ``ControlServer`` with rings on its own loop in a thread; ``run(plan, *inputs)`` sums its
    inputs, or waits for ``release`` first where the plan says "wait"."""

    def __init__(self, kind: str):
        self.secret = os.urandom(16)
        self.loop = new_loop(kind)
        self.rings = RingReaders()
        self.release = threading.Event()
        self.spinner: Spinner | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ControlServer(self.secret, {Request.RUN: self.run}, rings=self.rings)
        self.address = self.call(self.server.start())

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def run(self, plan, *inputs):
        if plan == "wait":
            while not self.release.is_set():
                await asyncio.sleep(0.001)
        return pickle.dumps({"plan": plan, "sum": [float(np.sum(a)) for a in inputs]})

    def poll(self, on: bool) -> None:
        """The host's loop polls (reading its rings on every turn) or sleeps, as a device process's."""

        async def set_polling():
            if busy_poll(self.loop, 60.0 if on else 0.0, self.rings):
                return
            if on:  # uvloop: no selector to wrap
                self.spinner = Spinner(self.loop, rings=self.rings)
                self.spinner.hold()
            elif self.spinner is not None:  # (a spinner stopped is done with: a new one next time)
                self.spinner, spinner = None, self.spinner
                spinner.stop()

        self.call(set_polling())
        deadline = time.monotonic() + 5
        while self.rings.awake != on and time.monotonic() < deadline:
            time.sleep(0.001)
        assert self.rings.awake == on

    def quiet(self) -> None:
        """Polling off, on the host's loop: the process's own switch interval again (a polling
        loop's is left to the next test otherwise)."""
        busy_poll(self.loop, 0.0, self.rings)  # (uvloop: no selector, nothing done)
        if self.spinner is not None:
            self.spinner.stop()

    def stop(self):
        if not self.thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.quiet)
        self.loop.call_soon_threadsafe(self.server.close)
        time.sleep(0.05)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        remove_shared(shared_memory_prefix(self.secret))


@pytest.fixture(params=EVENT_LOOPS)
def host(request):
    h = RingHost(request.param)
    yield h
    h.stop()


def opened(host: RingHost) -> ControlLine:
    line = ControlLine(host.address, host.secret)
    line.open_rings(shared_memory_prefix(host.secret))
    assert line.calls_ring is not None and line.answers_ring is not None
    return line


def call(line: ControlLine, tag: int, plan, *inputs) -> bool:
    return line.write(ControlLine.frame(tag, Request.RUN, (plan, *inputs)))


def answered(line: ControlLine, tag: int, spin: float) -> tuple[dict, bool]:
    """The answer to call ``tag`` and whether it came by ring. (A polling wait leaves the
    driver's ring awake, so that an answer that comes before the next wait begins goes by ring;
    the first call has no wait before it.)"""
    assert control_line.wait([line], tag, 10.0, spin=spin) == [line]
    by_ring = line.answers[tag].by_ring
    return pickle.loads(line.take(tag)), by_ring


def test_calls_go_by_ring_while_the_host_polls_and_answers_while_the_driver_does(host):
    line = opened(host)
    try:
        host.poll(True)
        line.answers_ring.set_awake(True)  # (as a polling wait before it would have left it)
        assert call(line, 1, "p", np.arange(4.0), np.ones(3, np.float32))  # by ring: no system call
        assert answered(line, 1, spin=5.0) == ({"plan": "p", "sum": [6.0, 3.0]}, True)
        host.poll(False)
        line.answers_ring.set_awake(False)  # (as a wait that slept leaves it: the last one returned awake)
        assert not call(line, 2, "q", np.ones(2))  # the host asleep: on the socket
        assert answered(line, 2, spin=0.0) == ({"plan": "q", "sum": [2.0]}, False)  # the driver asleep too
        host.poll(True)
        line.answers_ring.set_awake(True)
        assert not call(line, 3, "large", np.ones(LARGEST // 8))  # too large for a ring: the socket
        assert answered(line, 3, spin=5.0) == ({"plan": "large", "sum": [float(LARGEST // 8)]}, True)
        for tag in range(4, 200):  # round the ring's end, both ways
            assert call(line, tag, "p", np.full(512, tag, np.float64))
            assert answered(line, tag, spin=5.0) == ({"plan": "p", "sum": [512.0 * tag]}, True)
    finally:
        line.close()


def test_a_host_asleep_after_the_driver_looked_is_woken_by_the_doorbell(host, monkeypatch):
    line = opened(host)
    try:
        host.rings.wake()  # the driver sees the host awake, but nothing on its loop reads the ring
        # ...and asleep once it has put the call
        monkeypatch.setattr(frame_rings, "fence", lambda: [r.set_awake(False) for r in host.rings.readers])
        assert call(line, 1, "p", np.ones(5))
        assert answered(line, 1, spin=0.0) == ({"plan": "p", "sum": [5.0]}, False)
    finally:
        line.close()


def test_a_driver_asleep_after_the_host_looked_is_woken_by_the_doorbell(host, monkeypatch):
    line = opened(host)
    try:
        call(line, 1, "wait", np.ones(2))
        got = []
        waiter = threading.Thread(target=lambda: got.append(control_line.wait([line], 1, 10.0, spin=0.0)))
        waiter.start()
        time.sleep(0.2)  # asleep in its poll, its ring of answers said asleep
        line.answers_ring.set_awake(True)  # as the host sees it: the driver's "asleep" not yet seen
        monkeypatch.setattr(frame_rings, "fence", lambda: line.answers_ring.set_awake(False))
        began = time.monotonic()
        host.release.set()
        waiter.join(10)
        # put in the ring, read once the doorbell woke it (not at the wait's timeout, 10 s)
        assert got == [[line]] and line.answers[1].by_ring and time.monotonic() - began < 5
        assert pickle.loads(line.take(1)) == {"plan": "wait", "sum": [2.0]}
    finally:
        line.close()


def test_a_polling_wait_sees_a_host_die_with_rings_open(host):
    line = opened(host)
    host.poll(True)
    call(line, 1, "wait")
    host.stop()  # the line's other end closes
    assert control_line.wait([line], 1, 10.0, spin=5.0) == [line]
    assert line.outcome(1).kind is OutcomeKind.DEAD


def test_an_answer_by_ring_to_a_call_given_up_on_is_dropped(host):
    """An aborted run's answer may come by ring during the next run's wait: dropped there, as one
    on the socket is, and the wait goes on to the answer it waits for."""
    line = opened(host)
    try:
        host.poll(True)
        line.answers_ring.set_awake(True)
        assert call(line, 1, "given up on", np.ones(2))  # nobody waits for its answer
        time.sleep(0.2)  # its answer in the ring by now
        assert call(line, 2, "p", np.ones(3))
        assert answered(line, 2, spin=5.0) == ({"plan": "p", "sum": [3.0]}, True)
        assert 1 not in line.answers
    finally:
        line.close()


def test_a_line_opened_since_the_last_wait_is_woken_with_the_others(host):
    """The driver's rings of answers carry what each last said from one call to the next; a line
    opened since (a restarted process's) is woken with the rest, and all sleep together."""
    old, new = opened(host), opened(host)
    try:
        old.answers_ring.set_awake(True)  # as the last run's wait left it
        rings = RingReaders.as_they_are([old.answers_ring, new.answers_ring])
        assert rings.awake and new.answers_ring.awake and new.answers_ring.counters[frame_rings.AWAKE] == 1
        rings.sleep()
        assert not old.answers_ring.awake and not new.answers_ring.awake
    finally:
        old.close()
        new.close()
