"""Busy-polling a device process's event loop (``runtime/wire/polling.py``): the loop sees the same
events, sleeps again after its spin, is restored by a spin of 0, and a Ray mesh polls only where
each of the node's device processes has a core (or as told), with the same bits either way."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

import numpy as np
import pytest

import runtime_helpers
from simshard.runtime.wire.polling import SPIN_SECONDS, answer_spin, busy_poll, driver_should_spin, should_spin


def test_a_polling_loop_sees_each_event_and_sleeps_after_its_spin(never_step_aside):
    """What the loop asks its selector, recorded under the polling wrapper: non-blocking polls
    for the spin's 50 ms (wall clock, which passes however loaded the machine is), then one
    blocking select for the rest of the wait. (CPU time would say the same only on an idle core:
    under load the spinning thread gets less of it.)"""
    loop = asyncio.new_event_loop()
    a, b = socket.socketpair()
    try:
        original, switch = loop._selector.select, sys.getswitchinterval()
        asked = []  # (when, timeout) of each select the polling wrapper makes

        def recorded(timeout=None):
            asked.append((time.monotonic(), timeout))
            return original(timeout)

        loop._selector.select = recorded
        assert busy_poll(loop, 0.05)
        assert loop._selector.select not in (original, recorded)
        a.setblocking(False)

        async def wait():
            loop.call_later(0.01, b.send, b"x")  # arrives within the spin
            got = await loop.sock_recv(a, 1)
            idle = time.monotonic()
            await asyncio.sleep(0.3)  # nothing arrives: the loop polls for 50 ms, then sleeps
            return got, idle, time.monotonic() - idle

        got, idle, wall = loop.run_until_complete(wait())
        assert got == b"x" and wall >= 0.29
        after = [(when - idle, timeout) for when, timeout in asked if when >= idle]
        polls = [when for when, timeout in after if timeout == 0]
        sleeps = [(when, timeout) for when, timeout in after if timeout != 0]
        assert len(polls) >= 2, after  # it polled ...
        assert sleeps and sleeps[0][0] >= 0.045, after  # ... for the whole spin before it slept,
        assert sleeps[0][1] is not None and sleeps[0][1] > 0.1, after  # and then for the rest of the wait
        assert sys.getswitchinterval() <= 1e-4  # other threads get the lock within 0.1 ms
        assert busy_poll(loop, 0)  # restored: the selector's own select and switch interval again
        assert loop._selector.select == recorded and sys.getswitchinterval() == switch
    finally:
        a.close()
        b.close()
        loop.close()


def test_device_processes_poll_with_a_core_each_and_the_driver_only_with_one_left_over():
    cores = len(os.sched_getaffinity(0))
    assert should_spin(cores - 1) and should_spin(cores) and not should_spin(cores + 1)
    assert driver_should_spin(cores - 1) and not driver_should_spin(cores) and not driver_should_spin(cores + 1)


def test_a_loop_without_a_selector_is_left_alone():
    class Bare:
        pass

    assert busy_poll(Bare(), 0.001) is False


@pytest.mark.parametrize("poll", [None, True, False])
def test_a_ray_mesh_polls_as_told_or_where_the_node_has_the_cores(ray_session, poll):
    from simshard.runtime import run_local
    from simshard.runtime.ray.driver.mesh import RayMesh
    from test_ray import MESH, bits, every_collective

    spmd = every_collective(cols=6)
    rng = np.random.default_rng(5)
    inputs = {d: [rng.standard_normal((8, 6)).astype(np.float32)] for d in spmd.devices}
    local = run_local(spmd, inputs)
    with RayMesh(MESH, devices_per_process=4, busy_poll=poll) as devices:
        remote = devices.run_spmd(spmd, inputs)
        expected = should_spin(2) if poll is None else poll  # 2 processes on this node
        assert [devices.polls(d) for d in spmd.devices] == [expected] * 8
        # the driver polls for answers where its devices do and a core is left over for it
        assert devices.driver_spin == (SPIN_SECONDS if expected and driver_should_spin(2) else 0.0)
        # how often each process's loop stepped aside for another task (``wire/preemption``), asked on it
        assert all(ray_session.get(devices.call(d, "stepped_aside")) >= 0 for d in (0, 4))
        key = next(iter(devices.run_seconds))  # run_spmd's program, timed as it ran
        assert devices.answer_spin(key) == answer_spin(devices.driver_spin, devices.run_seconds[key])
        outputs = dict(remote.outputs)
    for d in spmd.devices:
        assert [bits(a) for a in outputs[d]] == [bits(a) for a in local.outputs[d]], d
    assert remote.records == local.records


def test_the_driver_polls_long_enough_for_a_short_run_and_no_longer_than_a_switch_interval():
    """``answer_spin``: nothing where the processes do not poll; the base before a program's first
    run and for runs shorter than it; a run and a half for longer ones; never past the cap."""
    from simshard.runtime.wire.polling import ANSWER_SPIN_MAX

    assert answer_spin(0.0, 2e-3) == 0.0
    assert answer_spin(SPIN_SECONDS, None) == SPIN_SECONDS
    assert answer_spin(SPIN_SECONDS, SPIN_SECONDS / 4) == SPIN_SECONDS
    assert answer_spin(SPIN_SECONDS, 2e-3) == pytest.approx(3e-3)
    assert answer_spin(SPIN_SECONDS, 1.0) == ANSWER_SPIN_MAX == 5e-3


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_a_spinner_polls_a_loop_while_held_and_lets_it_sleep_after(kind, never_step_aside):
    """A loop with no selector to wrap (uvloop's) polls by turns during a run: turn after turn
    through the whole wait while held, none once released; the events are the same. (Turns, not
    CPU time: a loaded core gives a spinning thread only its share.)"""
    from runtime_helpers import new_loop
    from simshard.runtime.wire.polling import Spinner

    loop = new_loop(kind)
    a, b = socket.socketpair()
    a.setblocking(False)
    switch = sys.getswitchinterval()
    rings = runtime_helpers.CountedRings()
    try:
        spinner = Spinner(loop, rings=rings)

        async def wait():
            spinner.hold()
            spinner.hold()  # holds nest: one callback turning
            loop.call_later(0.2, b.send, b"x")
            got = await loop.sock_recv(a, 1)
            held = rings.turns
            assert sys.getswitchinterval() <= 1e-4
            spinner.release()
            spinner.release()
            await asyncio.sleep(0.01)  # (the linger, 1 ms, over)
            turns = rings.turns
            await asyncio.sleep(0.2)
            return got, held, rings.turns - turns

        got, held, released = loop.run_until_complete(wait())
        assert got == b"x"
        # it turned through the 200 ms wait (a turn is microseconds; a loaded core's share of
        # 200 ms holds thousands) and not once in the 200 ms after
        assert held > 100 and released == 0, (held, released)
        assert not spinner.turning
        assert sys.getswitchinterval() <= 1e-4  # until polling stops: the answer's write wants the lock back
        spinner.stop()
        assert sys.getswitchinterval() == switch
    finally:
        a.close()
        b.close()
        loop.close()


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_a_spinner_lingers_after_a_run_then_sleeps(kind, never_step_aside):
    """After the last hold goes, a spinner polls ``linger`` seconds more (where a training loop's
    next run call comes, a few hundred microseconds after the last answer), then stops: turns
    through the linger, none after it; a hold within the linger keeps one callback."""
    from runtime_helpers import new_loop
    from simshard.runtime.wire.polling import Spinner

    loop = new_loop(kind)
    rings = runtime_helpers.CountedRings()
    spinner = Spinner(loop, linger=0.15, rings=rings)

    async def run():
        spinner.hold()
        await asyncio.sleep(0)
        spinner.release()
        turns = rings.turns
        await asyncio.sleep(0.1)
        lingering = rings.turns - turns
        spinner.hold()  # a run within the linger: still one callback turning
        spinner.release()
        await asyncio.sleep(0.2)  # the linger over (0.15 s from the release), then 50 ms asleep
        turns = rings.turns
        await asyncio.sleep(0.15)
        return lingering, rings.turns - turns

    try:
        lingering, after = loop.run_until_complete(run())
        assert not spinner.turning
        assert lingering > 100 and after == 0, (lingering, after)
    finally:
        spinner.stop()
        loop.close()


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_a_spinner_pauses_while_the_processs_kernels_compute(kind, never_step_aside):
    """While a run's kernels compute on the process's threads (``KernelThreads``) the loop stops
    turning, so it does not spin on the cores they need; it turns again when they are back, and
    not at all once the run has let go (even if the kernels come back after it)."""
    from runtime_helpers import new_loop
    from simshard.runtime.wire.polling import Spinner

    loop = new_loop(kind)
    spinner = Spinner(loop)

    async def run():
        seen = []
        spinner.hold()
        await asyncio.sleep(0)
        seen.append(spinner.turning)
        spinner.pause(True)  # kernels out
        await asyncio.sleep(0.01)
        seen.append(spinner.turning)
        spinner.pause(False)  # back
        seen.append(spinner.turning)
        spinner.pause(True)
        spinner.release()  # the run ends while a kernel is still out
        spinner.pause(False)
        await asyncio.sleep(0.01)
        seen.append(spinner.turning)
        return seen

    try:
        assert loop.run_until_complete(run()) == [True, False, True, False]
    finally:
        spinner.stop()
        loop.close()


def test_a_polling_selector_loop_sleeps_while_the_processs_kernels_compute():
    """``pause_polling``: the selector's own (sleeping) select while kernels are out, the polling
    one after; the short switch interval throughout (a kernel thread hands its result back)."""
    from simshard.runtime.wire.polling import SWITCH_SECONDS, pause_polling

    loop = asyncio.new_event_loop()
    switch = sys.getswitchinterval()
    try:
        original = loop._selector.select
        assert busy_poll(loop, 0.05)
        pause_polling(loop, True)
        assert loop._selector.select == original and sys.getswitchinterval() <= SWITCH_SECONDS
        pause_polling(loop, False)
        assert loop._selector.select != original and sys.getswitchinterval() <= SWITCH_SECONDS
    finally:
        busy_poll(loop, 0.0)
        loop.close()
    assert sys.getswitchinterval() == switch
