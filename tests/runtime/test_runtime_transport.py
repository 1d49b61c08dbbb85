"""The transport: what it records, copies, refuses."""

import asyncio

import numpy as np
import pytest

from simshard.runtime.core.transport_errors import DuplicateMessage, RecvTimeout, TagMismatch

from simshard.runtime.local.in_memory import InMemoryTransport

from simshard.runtime.core.mailbox import Mailbox


def test_records_bytes_and_messages_per_device_peer_and_key():
    async def main():
        t = InMemoryTransport((0, 1, 2))
        t.send(0, 1, (5, 0), np.zeros(3, np.float32))
        t.send(0, 2, (5, 0), np.zeros(4, np.float64))
        t.send(2, 1, (6, 1), np.zeros((2, 2), np.int16))
        await t.recv(1, 0, (5, 0))
        await t.recv(2, 0, (5, 0))
        await t.recv(1, 2, (6, 1))
        return t

    t = asyncio.run(main())
    log = t.log
    assert log.bytes_sent(0) == 12 + 32 and log.bytes_received(1) == 12 + 8 and log.bytes_sent() == log.bytes_received()
    tot = log.totals(0, 5)
    assert (tot.sent, tot.received, tot.messages_sent, tot.messages_received) == (44, 0, 2, 0)
    assert tot.peer_rows() == ((1, 12, 0), (2, 32, 0))
    assert log.totals(1, 6).peer_rows() == ((2, 0, 8),)
    assert log.matrix() == {(0, 1): 12, (0, 2): 32, (2, 1): 8}
    assert [(e.device, e.peer, e.direction, e.key, e.nbytes) for e in log.entries][:2] == [
        (0, 1, "sent", (5, 0), 12), (0, 2, "sent", (5, 0), 32)]


def test_the_receiver_gets_its_own_copy():
    async def main():
        t = InMemoryTransport((0, 1))
        x = np.arange(4.0)
        t.send(0, 1, (0, 0), x)
        x[:] = -1  # the sender reuses its buffer
        return await t.recv(1, 0, (0, 0))

    assert np.array_equal(asyncio.run(main()), np.arange(4.0))


def test_tag_mismatch_and_duplicates():
    async def tagged():
        t = InMemoryTransport((0, 1))
        t.send(0, 1, (0, 0), np.zeros(1), tag=("all_gather",), note="at position 3")
        await t.recv(1, 0, (0, 0), tag=("all_reduce",))

    with pytest.raises(TagMismatch) as err:
        asyncio.run(tagged())
    assert err.value.got == ("all_gather",) and err.value.note == "at position 3"

    async def twice():
        t = InMemoryTransport((0, 1))
        t.send(0, 1, (0, 0), np.zeros(1))
        t.send(0, 1, (0, 0), np.zeros(1))

    with pytest.raises(DuplicateMessage, match="device 0 sent message \\(0, 0\\) to device 1 twice"):
        asyncio.run(twice())


def test_mailbox_times_out_and_matches_by_source_and_key():
    async def main():
        box = Mailbox(1)
        with pytest.raises(RecvTimeout, match="device 1 waited 0.05 s for message \\(2, 0\\) from device 0"):
            await box.get(0, (2, 0), 0.05)
        from simshard.runtime.core.mailbox import Message

        box.put(Message(3, 1, (2, 0), np.ones(1)))
        box.put(Message(0, 1, (2, 0), np.zeros(1)))
        a = await box.get(0, (2, 0), 1.0)
        b = await box.get(3, (2, 0), 1.0)
        return a.array, b.array, box.undelivered()

    a, b, rest = asyncio.run(main())
    assert a[0] == 0 and b[0] == 1 and rest == []


def test_a_message_is_copied_into_the_place_its_receiver_offers_when_it_fits():
    async def main():
        t = InMemoryTransport((0, 1))
        place, other = np.empty(4), np.empty(3)
        t.expect(1, 0, (0, 0), place)
        t.expect(1, 0, (0, 1), other)  # a place of another shape: the message arrives as usual
        x = np.arange(4.0)
        t.send(0, 1, (0, 0), x)
        t.send(0, 1, (0, 1), x)
        x[:] = -1  # still the receiver's own copy
        t.send(0, 1, (0, 2), np.ones(2))
        t.expect(1, 0, (0, 2), np.empty(2))  # offered after it arrived: not used
        return place, other, [await t.recv(1, 0, (0, k)) for k in range(3)]

    place, other, (a, b, c) = asyncio.run(main())
    assert a is place and np.array_equal(a, np.arange(4.0))
    assert b is not other and np.array_equal(b, np.arange(4.0))
    assert np.array_equal(c, np.ones(2))


def test_an_array_a_peer_has_yet_to_read_is_not_written_in_place():
    """The executor updates a buffer in place (a scan's stacked output) only when no message still
    to be read from this process's memory views it (``Transport.lends``)."""
    import numpy as np

    from simshard.spmd import Schedule
    from simshard.runtime.core.executor import Executor
    from simshard.runtime.local.in_memory import InMemoryTransport

    lent = np.zeros(4)

    class Lending(InMemoryTransport):
        def lends(self, owner):
            return owner is lent

    ex = Executor(Schedule(0, (), (), ()), Lending((0,)))
    mine = np.zeros(4)
    ex.buffers.update({7: lent, 8: mine})
    assert not ex._owns(7, lent) and ex._owns(8, mine)
    assert not InMemoryTransport((0,)).lends(lent)


def test_a_body_left_in_its_senders_memory_is_read_into_the_place_offered_when_received():
    """A message that arrived as a ``Lent`` (its body still in the sender's memory) before its
    receiver offered a place is read into that place when received: one copy, whatever the
    order; one nobody receives is released when the mailbox closes."""
    import asyncio
    import os

    import numpy as np
    import pytest

    from simshard.runtime.wire import memory_reads
    from simshard.runtime.core.mailbox import Mailbox

    if not memory_reads.memory_reads_possible():
        pytest.skip("no process_vm_readv here")
    body = np.arange(12, dtype=np.float32).reshape(3, 4)
    told = []

    async def main():
        box = Mailbox(1)
        box.arrive(0, (5, 0), memory_reads.Lent(body.dtype, body.shape, os.getpid(), body.ctypes.data, lambda: told.append("a")),
                   None, "")
        box.arrive(2, (5, 0), memory_reads.Lent(body.dtype, body.shape, os.getpid(), body.ctypes.data, lambda: told.append("b")),
                   None, "")
        place = np.empty((3, 4), np.float32)
        box.expect(0, (5, 0), place)  # after its message arrived
        got = (await box.get(0, (5, 0), 1.0)).array
        box.close()  # device 2's message was never received
        return got, place

    got, place = asyncio.run(main())
    assert got is place and got.tobytes() == body.tobytes()
    assert told == ["a", "b"]


def test_a_run_aborted_before_it_started_lets_go_of_bodies_lent_for_it():
    """A message that arrived, still in its sender's memory, for a run its device never ran (the
    run was aborted first) is released when the device closes the run, so its sender lets go."""
    import asyncio
    import os

    import numpy as np
    import pytest

    from simshard.runtime.wire import memory_reads
    from simshard.runtime.ray.host.device import HostedDevice as _Device

    if not memory_reads.memory_reads_possible():
        pytest.skip("no process_vm_readv here")
    body = np.arange(6, dtype=np.float32)
    told = []

    async def main():
        device = _Device(1)
        lent = memory_reads.Lent(body.dtype, body.shape, os.getpid(), body.ctypes.data, lambda: told.append("released"))
        assert device.deliver_now(7, 0, (3, 0), lent, None, "") == "ok"
        await device.abort(7)
        return await device.run("never loaded", 7, False)

    assert asyncio.run(main()).status == "aborted"
    assert told == ["released"]
