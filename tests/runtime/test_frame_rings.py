"""Rings of small frames (``runtime/wire/frame_rings.py``): a connection's small frames go by shared
memory only while the receiving process says it polls, arrive whole and in order, around the
ring's end too; a full ring, or a reader asleep, sends them on the socket instead; a reader that
fell asleep after the sender looked is woken by the doorbell; a sync hands on what the ring holds
before it is answered; a ring not of the mesh is refused; and a polling loop (asyncio's selector,
uvloop's turns) reads the rings with no call from anyone."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from simshard.runtime.wire import frame_rings
from simshard.runtime.wire.frame_rings import RingReader, rings_possible
from simshard.runtime.wire.polling import SPIN_SECONDS, Spinner, busy_poll
from simshard.runtime.wire.shared_memory import remove_shared, shared_memory_prefix
from simshard.runtime.wire.sockets import Connection, Listener
from runtime_helpers import EVENT_LOOPS, NEVER_STEP_ASIDE, run_on

pytestmark = [pytest.mark.skipif(not rings_possible(),
                                 reason="rings of frames are made on x86-64 with shared memory only"),
              pytest.mark.usefixtures("never_step_aside")]  # (what goes by ring while the ends poll)


async def connected(got: list, secret: bytes) -> tuple[Listener, Connection]:
    """A listener that keeps every frame's key and array in ``got``, and a connection to it whose
    ring the listener reads (its answer has come before the first sync's)."""

    def deliver(run_id, src, dst, key, array, tag, note):
        got.append((key, array))
        return "ok"

    listener = Listener(secret, deliver)
    await listener.start()
    conn = Connection(listener.address, secret)
    await asyncio.wait_for(conn.sync(), 5)
    assert conn.frames_read and len(listener.rings.readers) == 1
    return listener, conn


def on_each_loop(kind: str, body) -> None:
    """``await body(listener, conn, got)`` on a loop of ``kind``, over a fresh listener and
    connection (``connected``), both closed after and the mesh's shared files removed."""
    secret = os.urandom(16)

    async def test():
        got = []
        listener, conn = await connected(got, secret)
        try:
            await body(listener, conn, got)
        finally:
            conn.close()
            listener.close()

    try:
        run_on(kind, test())
    finally:
        remove_shared(shared_memory_prefix(secret))


def send(conn: Connection, k: int, n: int = 4) -> None:
    conn.send(1, 0, 1, (k, 0), np.full(n, k, np.float32), ("permute",), f"at position {k}")


async def until(check, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.001)):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("not within the time")


@pytest.mark.parametrize("kind", EVENT_LOOPS)
def test_small_frames_go_by_ring_only_while_the_reader_polls_and_arrive_whole(kind):
    async def test(listener, conn, got):
        listener.rings.wake()
        for k in range(3):
            send(conn, k)
        assert conn.ringed == 3 and got == []  # in the ring, not read yet
        assert listener.rings.drain() and not listener.rings.drain()
        assert [key for key, _ in got] == [(k, 0) for k in range(3)]
        assert all(np.array_equal(a, np.full(4, k, np.float32)) for k, (_, a) in enumerate(got))
        listener.rings.sleep()
        send(conn, 3)
        await asyncio.wait_for(conn.sync(), 5)
        assert conn.ringed == 3 and got[-1][0] == (3, 0)  # asleep: by the socket
        listener.rings.wake()
        send(conn, 4, n=20_000)  # a body of 80 KB is not sent in its frame: by the socket, awake or not
        send(conn, 5, n=16_000)  # one of 64 KB is, by the ring
        await asyncio.wait_for(conn.sync(), 5)
        assert conn.ringed == 4 and [key for key, _ in got[-2:]] == [(4, 0), (5, 0)]
        assert np.array_equal(got[-1][1], np.full(16_000, 5, np.float32))

    on_each_loop(kind, test)


@pytest.mark.parametrize("kind", EVENT_LOOPS)
def test_frames_round_the_rings_end_and_a_full_ring_sends_on_the_socket(kind):
    async def test(listener, conn, got):
        listener.rings.wake()
        sent = 0
        for k in range(3 * frame_rings.RING_BYTES // 3000):  # three times round the ring, read every 50 frames
            send(conn, k, n=700)
            sent += 1
            if k % 50 == 49:
                listener.rings.drain()
        listener.rings.drain()
        assert conn.ringed == sent and [key for key, _ in got] == [(k, 0) for k in range(sent)]
        assert all(np.array_equal(a, np.full(700, k, np.float32)) for k, (_, a) in enumerate(got))
        got.clear()
        k = 0
        for k in range(1, frame_rings.RING_BYTES // 2000):  # never read: it fills, then the socket takes over
            before = conn.ringed
            send(conn, sent + k - 1, n=700)
            if conn.ringed == before:
                break
        assert conn.ringed == sent + k - 1 and k > 300  # it held some 360 frames, the last went by socket
        await asyncio.wait_for(conn.sync(), 5)  # a sync hands on the ring's frames before it is answered
        assert sorted(key for key, _ in got) == [(sent + j, 0) for j in range(k)]  # each once, none lost

    on_each_loop(kind, test)


@pytest.mark.parametrize("kind", EVENT_LOOPS)
def test_a_reader_asleep_after_the_sender_looked_is_woken_by_the_doorbell(kind):
    async def test(listener, conn, got):
        listener.rings.wake()
        looks = iter([True, False])  # awake when the sender looks first, asleep when it looks again
        conn.frames.awake = lambda: next(looks)
        send(conn, 7)
        assert conn.ringed == 1
        await until(lambda: got)  # nobody drains: the doorbell on the socket made the reader read the ring
        assert got[0][0] == (7, 0)

    on_each_loop(kind, test)


@pytest.mark.parametrize("kind", EVENT_LOOPS)
def test_a_polling_loop_reads_the_rings_and_says_it_sleeps_when_it_stops(kind):
    async def test(listener, conn, got):
        loop = asyncio.get_running_loop()
        spinner = None
        if not busy_poll(loop, SPIN_SECONDS, listener.rings):  # uvloop: no selector to wrap
            spinner = Spinner(loop, rings=listener.rings)
            spinner.hold()
        await until(lambda: listener.rings.awake)
        for k in range(20):
            send(conn, k)
            await until(lambda: len(got) == k + 1)  # read on a turn of the loop, no sync, no doorbell
        assert conn.ringed == 20
        if spinner is None:
            busy_poll(loop, 0.0, listener.rings)
        else:
            spinner.stop()
            await asyncio.sleep(0.01)
        assert not listener.rings.awake
        assert all(r.counters[frame_rings.AWAKE] == 0 for r in listener.rings.readers)  # what the senders see
        send(conn, 20)
        await until(lambda: len(got) == 21)
        assert conn.ringed == 20  # the reader sleeps: by the socket

    on_each_loop(kind, test)


@pytest.mark.parametrize("kind", EVENT_LOOPS)
def test_a_ring_named_again_inside_the_ring_is_refused_and_changes_nothing(kind):
    """A frame naming a ring, sent inside the ring (no sender of ours does), is answered "no ring"
    on the socket; the sender takes the first answer only, and its frames still go by ring."""
    from simshard.runtime.wire.frames import FRAME

    async def test(listener, conn, got):
        listener.rings.wake()
        name = conn.frames.name.encode()
        assert conn.frames.put(FRAME.pack(10**6, 0, len(name)) + name)
        listener.rings.drain()
        await asyncio.wait_for(conn.sync(), 5)  # the "no ring" answer has come before the sync's
        assert conn.frames_read and len(listener.rings.readers) == 1
        send(conn, 1)
        assert conn.ringed == 1 and listener.rings.drain() and got[-1][0] == (1, 0)

    on_each_loop(kind, test)


def test_a_ring_not_of_the_mesh_is_refused(tmp_path):
    prefix = "simshard-" + "ab" * 8
    for name in ("simshard-" + "cd" * 8 + "-p1-frames-" + "0" * 16, "../../etc/passwd", prefix + "-p1-frames-x"):
        with pytest.raises(ValueError, match="is not a ring of this mesh"):
            RingReader(name, prefix, stream=None)


def test_with_rings_in_use_a_killed_device_is_rerun_bitwise_and_its_new_process_reads_by_ring(ray_session):
    """Two device processes polling (rings in use, route "unix ring", the control lines' too): one
    killed before a run, the run retried on a restarted process is bitwise the local run's, and
    the new process's rings carry frames again."""
    from simshard.runtime import run_local
    from simshard.runtime.ray.driver.mesh import RayMesh
    from simshard.spmd import AllGather, AllReduce, CollectivePermute, Schedule, SpmdProgram

    from runtime_helpers import bits, kill

    ids = (0, 1)
    spmd = SpmdProgram(None, tuple(Schedule(d, (0,), sum(((
        AllReduce(3 * i + 1, f"%{i} ar", src=3 * i, dst=3 * i + 1, group=ids, axes=("x",)),
        AllGather(3 * i + 2, f"%{i} ag", src=3 * i + 1, dst=3 * i + 2, group=ids, axis=0, axes=("x",)),
        CollectivePermute(3 * i + 3, f"%{i} cp", src=3 * i + 2, dst=3 * i + 3, pairs=((0, 1), (1, 0)),
                          shape=(8 << i, 16), dtype="float32", axes=("x",)))
        for i in range(4)), ()), (12,)) for d in ids), (), ())
    inputs = {d: [np.arange(64 * (d + 1), 64 * (d + 2), dtype=np.float32).reshape(4, 16)] for d in ids}
    expect = {d: [bits(a) for a in run_local(spmd, inputs).outputs[d]] for d in ids}

    def outputs(res):
        return {d: [bits(a) for a in res.outputs[d]] for d in ids}

    with RayMesh(devices=ids, devices_per_process=1, busy_poll=True, runtime_env=NEVER_STEP_ASIDE) as mesh:
        # the driver polls for each whole run, as where it has a core (on 2 cores a run outlasts
        # its spin, and then the answers come on the socket)
        mesh.answer_spin = lambda key: 30.0
        key = mesh.load(spmd, timeout=30.0)
        # (a first run wakes the driver's rings of answers, which stay awake between runs: the
        # first run's answers may come before its wait wakes them)
        assert outputs(mesh.execute(key, spmd, inputs)) == expect
        runs = [mesh.execute(key, spmd, inputs) for _ in range(3)]
        assert all(outputs(r) == expect for r in runs)
        assert any(r.messages.get("unix ring", 0) for r in runs), [r.messages for r in runs]
        assert answers_by_ring(runs), [r.controller_calls for r in runs]  # the run's answers too
        kill(mesh, 1)  # (and seen gone)
        again = mesh.execute(key, spmd, inputs, retries=2)
        assert again.restarted == (1,) and outputs(again) == expect
        runs = [mesh.execute(key, spmd, inputs) for _ in range(3)]
        assert all(outputs(r) == expect for r in runs)
        assert any(r.messages.get("unix ring", 0) for r in runs), [r.messages for r in runs]
        assert answers_by_ring(runs), [r.controller_calls for r in runs]
        line = mesh.lines.by_group[(1,)]  # the new process's line, with both its rings
        assert line.calls_ring is not None and line.answers_ring is not None


def answers_by_ring(runs) -> bool:
    """Whether every run's answers came on the control lines' rings. (Its calls go by ring where
    the process still polls after the last run, ``Spinner``'s linger, 1 ms: timing, not asserted.)"""
    return all(r.controller_calls.get("answer by ring", 0) == 2 for r in runs)


def test_with_rings_in_use_a_failed_run_names_its_device_and_the_next_runs_bitwise(ray_session):
    """A device that fails while its peer waits for it in an all-reduce (the peer aborted, both
    answers by ring as the driver polls): the error names the failing device, and a run after
    it is bitwise, its answers by ring again (nothing of the failed run's left in the rings)."""
    from simshard.runtime import ExecutionError, run_local
    from simshard.runtime.ray.driver.mesh import RayMesh
    from simshard.spmd import AllReduce, Free, Schedule, SpmdProgram

    from runtime_helpers import bits

    ids = (0, 1)
    total = AllReduce(1, "%1 sum", src=0, dst=1, group=ids, axes=("x",))
    good = SpmdProgram(None, tuple(Schedule(d, (0,), (total,), (1,)) for d in ids), (), ())
    bad = SpmdProgram(None, (Schedule(0, (0,), (total,), (1,)),
                             Schedule(1, (0,), (Free(0, "", bufs=(5,)), total), (1,))), (), ())
    inputs = {d: [np.arange(4, dtype=np.float32) + d] for d in ids}
    expect = {d: bits(run_local(good, inputs).outputs[d][0]) for d in ids}
    with RayMesh(devices=ids, devices_per_process=1, busy_poll=True, runtime_env=NEVER_STEP_ASIDE) as mesh:
        mesh.answer_spin = lambda key: 30.0  # (as in the test above: the driver polls for each whole run)
        with pytest.raises(ExecutionError, match=r"device 1 .*frees buffer b5, which it does not hold"):
            mesh.run_spmd(bad, inputs)
        runs = [mesh.run_spmd(good, inputs) for _ in range(3)]
        assert all({d: bits(r.outputs[d][0]) for d in ids} == expect for r in runs)
        assert answers_by_ring(runs), [r.controller_calls for r in runs]
