"""Schedules that do not match fail fast with an error naming both devices and where each was;
nothing hangs."""

import asyncio
import time

import numpy as np
import pytest

from simshard.spmd import AllGather, AllReduce, CollectivePermute, Compute, Schedule, SpmdProgram
from simshard.runtime import Executor, PeerTimeoutError, ScheduleMismatchError, run_local
from runtime_helpers import BlindTransport


def spmd_of(per_device: dict) -> SpmdProgram:
    return SpmdProgram(None, tuple(Schedule(d, (0,), tuple(i), (0,)) for d, i in per_device.items()), (), ())


def run(per_device, timeout=10.0):
    spmd = spmd_of(per_device)
    start = time.perf_counter()
    with pytest.raises(ScheduleMismatchError) as err:
        run_local(spmd, {d: [np.ones((2, 2), np.float32)] for d in per_device}, timeout=timeout)
    assert time.perf_counter() - start < 1.0  # detected, not timed out
    return err.value


def test_waiting_for_a_collective_the_peer_never_reaches_is_a_deadlock():
    e = run({
        0: [AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1), axes=("x",))],
        1: [AllGather(2, "reshard", src=0, dst=0, group=(0, 1), axis=0, axes=("x",)),
            AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1), axes=("x",))],
    })
    msg = str(e)
    assert "deadlock" in msg
    assert "device 0 waits for device 1 (message (1, 0)) while at position 0 [1] all_reduce over (0, 1) (axes x) from '%5 dot'" in msg
    assert "device 1 waits for device 0 (message (2, 0)) while at position 0 [2] all_gather over (0, 1) (axes x) from 'reshard'" in msg
    assert e.devices == (0, 1) and set(e.positions) == {0, 1}


@pytest.mark.parametrize(
    "other",
    [
        AllGather(1, "%7 concat", src=0, dst=0, group=(0, 1), axis=0),  # another kind under the same id
        AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1), reduce_op="max"),  # another reduce op
        AllReduce(1, "%5 dot", src=0, dst=0, group=(1, 0)),  # another group order
    ],
    ids=["kind", "reduce_op", "group_order"],
)
def test_a_different_collective_under_the_same_id(other):
    e = run({0: [AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1))], 1: [other]})
    from simshard.runtime.core.collectives import signature

    # device 0 receives first (tasks start in device order): its own step, then the sender's, whose
    # message names its position and kind in a few words and its collective in full (the tag)
    sender = f"at position 0 [1] {other.kind} from {other.source!r}"
    sent = signature(other, np.float32, (2, 2) if other.kind == "all_reduce" else None)
    assert str(e) == (
        "schedules disagree at instruction id 1: device 0 at position 0 [1] all_reduce over (0, 1) from '%5 dot' "
        f"expects all_reduce((0, 1), 'sum', (2, 2), '<f4'), but device 1 {sender} sent {sent[0]}{sent[1:]}"
    )
    assert e.devices == (0, 1) and e.positions[1] == sender


def test_waiting_for_a_device_that_has_finished():
    e = run({0: [AllGather(3, "g", src=0, dst=0, group=(0, 1), axis=0)], 1: []})
    assert "device 0 at position 0 [3] all_gather over (0, 1) from 'g' waits for device 1's part of instruction id 3, " \
           "but device 1 finished its schedule without sending it" in str(e)


def test_a_message_nobody_receives():
    e = run({
        0: [CollectivePermute(4, "p", src=0, dst=0, pairs=((0, 1),), shape=(2, 2), dtype="float32")],
        1: [CollectivePermute(4, "p", src=0, dst=0, pairs=(), shape=(2, 2), dtype="float32")],
    })
    assert "device 0 sent message (4, 0)" in str(e) and "to device 1, which finished without receiving it" in str(e)


def test_three_devices_one_finished_two_deadlocked():
    e = run({
        0: [AllGather(1, "a", src=0, dst=0, group=(0, 1), axis=0)],
        1: [AllGather(2, "b", src=0, dst=0, group=(0, 1), axis=0)],
        2: [Compute(0, "c", op="neg", inputs=(0,), outputs=(0,))],
    })
    assert "deadlock" in str(e) and e.devices == (0, 1)


def test_without_a_global_view_a_timeout_names_both_devices():
    scheds = {
        0: Schedule(0, (0,), (AllReduce(1, "%5 dot", src=0, dst=0, group=(0, 1)),), (0,)),
        1: Schedule(1, (0,), (AllGather(2, "r", src=0, dst=0, group=(0, 1), axis=0),), (0,)),
    }

    async def main():
        t = BlindTransport((0, 1), timeout=0.2)
        exs = {d: Executor(s, t, describe_peer=lambda p: exs[p].where()) for d, s in scheds.items()}
        return await asyncio.gather(*(ex.run([np.ones(2)]) for ex in exs.values()), return_exceptions=True)

    start = time.perf_counter()
    r0, r1 = asyncio.run(main())
    assert time.perf_counter() - start < 2.0
    assert isinstance(r0, PeerTimeoutError) and isinstance(r1, PeerTimeoutError)
    assert str(r0) == (
        "device 0 at position 0 [1] all_reduce over (0, 1) from '%5 dot' waited 0.2 s for device 1's part of "
        "instruction id 1; device 1 is at position 0 [2] all_gather over (0, 1) from 'r'"
    )
    assert r0.devices == (0, 1) and r0.instr == 1 and r0.position == 0
