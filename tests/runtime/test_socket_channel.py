"""The socket channel between device processes of one node (``runtime/wire/``), in
one process: frames carry any array exactly and in order (small ones through the staging buffer,
large ones received in place, frames straddling the buffer's end), a sync settles every frame
before it while a refused frame is answered with its reason, a connection without the mesh's
secret delivers nothing, and a closed peer fails the waiting sync."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from simshard.runtime.wire import frames, memory_reads, shared_memory
from simshard.runtime.wire.memory_reads import Lent
from simshard.runtime.wire.shared_memory import SharedBlocks, remove_shared, shared_memory_prefix
from simshard.runtime.wire.sockets import Connection, Listener
from runtime_helpers import EVENT_LOOPS, run_on

ARRAYS = [np.arange(12, dtype=np.float32).reshape(3, 4), np.float64(2.5) * np.ones(()), np.zeros((0, 3), np.int32),
          np.array([True, False]), np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2],  # not contiguous
          np.arange(3 << 18, dtype=np.float32).reshape(-1, 256),  # 3 MiB: received in place
          np.arange(40_000, dtype=np.int16)]  # 80 KB: in place, after the staging buffer's leftovers
# enough mid-sized frames to wrap the staging buffer several times
ARRAYS += [np.full(5_000 + 97 * k, k, np.float64) for k in range(40)]


LOOP = {"kind": "asyncio"}  # the event loop ``_run`` runs on (set per test by ``every_loop``)


@pytest.fixture(autouse=True, params=EVENT_LOOPS)
def every_loop(request):
    """Every test on asyncio's loop and on uvloop's (Ray's where it is installed)."""
    LOOP["kind"] = request.param
    yield request.param
    LOOP["kind"] = "asyncio"


def _run(coro):
    return run_on(LOOP["kind"], coro)


def test_frames_carry_every_array_exactly_and_in_order():
    async def main():
        got = []

        def deliver(run_id, src, dst, key, array, tag, note):
            got.append((run_id, src, dst, key, array, tag, note))
            return "finished" if key == (99,) else "ok"

        listener = Listener(b"s" * 16, deliver)
        await listener.start()
        conn = Connection(listener.address, b"s" * 16)
        sent = [conn.send(7, 1, 2, (k, 0), a, ("tag", k), f"note {k}") for k, a in enumerate(ARRAYS)]
        sent.append(conn.send(7, 1, 2, (99,), np.ones(1), None, ""))
        await asyncio.wait_for(conn.sync(), 5)
        assert conn.refused == {sent[-1]: "finished"}  # only a refusal is answered; a sync settles the rest
        assert [conn.answer(seq) for seq in sent] == ["ok"] * len(ARRAYS) + ["finished"]
        conn.close()
        listener.close()
        return got

    got = _run(main())
    assert [g[3] for g in got] == [(k, 0) for k in range(len(ARRAYS))] + [(99,)]  # in order
    for (run_id, src, dst, key, array, tag, note), want in zip(got, ARRAYS):
        assert (run_id, src, dst, tag, note) == (7, 1, 2, ("tag", key[0]), f"note {key[0]}")
        assert array.dtype == want.dtype and array.shape == want.shape and array.tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_connection_without_the_secret_delivers_nothing_and_a_closed_peer_fails_its_answers():
    async def main():
        got = []

        def deliver(*args):
            got.append(args)
            return "ok"

        listener = Listener(b"right secret 16b", deliver)
        await listener.start()
        wrong = Connection(listener.address, b"wrong secret 16b")
        wrong.send(0, 1, 2, (0,), np.ones(3), None, "")
        with pytest.raises(ConnectionError, match="closed"):
            await asyncio.wait_for(wrong.sync(), 5)
        listener.close()
        return got

    assert _run(main()) == []


def test_a_peer_that_is_not_listening_fails_the_sync_not_hangs():
    async def main():
        conn = Connection("\0simshard-nobody-listens-here", b"x" * 16)
        conn.send(0, 0, 1, (0,), np.ones(2), None, "")
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(conn.sync(), 5)

    _run(main())


def test_a_large_array_travels_in_a_shared_file_written_again_once_its_readers_let_go(tmp_path, monkeypatch):
    """An array sent to two peers is one file with a slot per reader; the receivers hand on
    read-only views of its mapping. While they hold them the file is busy (another array gets a
    new file); once they let go it is written again, so a run's pages are warm. ``close`` removes
    the files, the receivers' mappings staying valid."""
    import gc

    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))  # any directory works; /dev/shm is the fast one
    big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    other = -big

    async def main():
        got = []
        listener = Listener(b"s" * 16, lambda *a: (got.append(a[4]), "ok")[1])
        await listener.start()
        conn = Connection(listener.address, b"s" * 16)
        blocks = SharedBlocks(shared_memory_prefix(b"s" * 16))
        first = blocks.put(big, scope=1)
        second = blocks.put(big, scope=1)
        assert first[:2] == second[:2] and (first[2], second[2]) == (0, 1)  # one file, two readers
        sent = [conn.send(0, 1, 2, (k,), big, None, "", shared=s) for k, s in enumerate((first, second))]
        await asyncio.wait_for(conn.sync(), 5)
        assert [conn.answer(seq) for seq in sent] == ["ok", "ok"]
        busy = blocks.put(other, scope=2)  # the readers still hold their views: a second file
        assert busy[1] != first[1] and sorted(os.listdir(tmp_path)) == sorted([first[1], busy[1]])
        held = list(got)
        got.clear()
        conn.send(0, 1, 2, (2,), other, None, "", shared=busy)
        await asyncio.wait_for(conn.sync(), 5)
        assert np.array_equal(got[0], other)
        got.clear()
        gc.collect()
        again = blocks.put(other, scope=3)  # the second file's reader let go: written again
        assert again[1] == busy[1]
        blocks.close()
        conn.close()
        listener.close()
        return held

    held = _run(main())
    assert os.listdir(tmp_path) == []
    for array in held:
        assert np.array_equal(array, big) and not array.flags.writeable  # a read-only view of the mapping
    assert remove_shared(shared_memory_prefix(b"s" * 16)) == 0


async def _keyed(got: dict, places: dict):
    """A listener keeping each frame's array in ``got`` by the first part of its key, into the
    place ``places`` names for that key if any, and a connection to it."""
    listener = Listener(b"s" * 16, lambda run_id, src, dst, key, array, tag, note: (got.update({key[0]: array}), "ok")[1],
                        place=lambda run_id, src, dst, key, dtype, shape: places.get(key[0]))
    await listener.start()
    return listener, Connection(listener.address, b"s" * 16)


def test_a_frame_is_received_into_the_place_its_receiver_offers(tmp_path, monkeypatch):
    """A body from ``_IN_PLACE`` up, and an array in a shared-memory file, are written into the
    array ``place`` names (copied there from the mapped file); a frame with no place, or a small
    body (copied out of the stage either way), gets a new array."""
    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))
    arrays = {0: np.arange(7, dtype=np.float32), 1: np.arange(3 << 18, dtype=np.float32).reshape(-1, 256),
              2: np.arange(1 << 20, dtype=np.int32).reshape(1024, 1024), 3: np.arange(5, dtype=np.int64)}
    places = {k: np.empty_like(a) for k, a in arrays.items() if k != 3}

    async def main():
        got = {}
        listener, conn = await _keyed(got, places)
        blocks = SharedBlocks(shared_memory_prefix(b"s" * 16))
        for k, a in arrays.items():
            conn.send(0, 1, 2, (k, 0), a, None, "", shared=blocks.put(a, scope=1) if k == 2 else None)
        await asyncio.wait_for(conn.sync(), 5)
        blocks.close()
        conn.close()
        listener.close()
        return got

    got = _run(main())
    for k, a in arrays.items():
        assert got[k].dtype == a.dtype and got[k].tobytes() == a.tobytes()
        placed = k in places and (a.nbytes >= frames.IN_PLACE or k == 2)
        assert (got[k] is places[k]) if placed else (got[k] is not places.get(k) and got[k].flags.writeable)


def test_mid_sized_bodies_go_through_the_ring_while_it_has_room(tmp_path, monkeypatch):
    """Where a receiver may not read its sender's memory, bodies from RING_MIN up to SHM_BYTES are
    copied through the connection's ring of shared memory; one that finds no room (the unread ones
    fill it) crosses the socket; a sync frees the ring (the next body starts at its beginning
    again) and removes its file's name. Every array arrives exact, in order."""
    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))
    monkeypatch.setattr(memory_reads, "probe_memory", lambda *a: False)  # the kernel says no
    monkeypatch.setattr(shared_memory, "RING_BYTES", 1 << 20)
    arrays = [np.arange(k * 1000, k * 1000 + (100_000 + k), dtype=np.float32) for k in range(4)]  # ~400 KB each
    arrays.insert(1, np.arange(10, dtype=np.int8))  # small: in the frame

    async def main():
        got = []
        listener = Listener(b"s" * 16, lambda *a: (got.append(a), "ok")[1])
        await listener.start()
        conn = Connection(listener.address, b"s" * 16)
        for k, a in enumerate(arrays):
            conn.send(0, 1, 2, (k,), a, None, "")
        offsets = conn.ring.head
        await asyncio.wait_for(conn.sync(), 5)
        files_after_sync = os.listdir(tmp_path)
        conn.send(0, 1, 2, (len(arrays),), arrays[0], None, "")
        restarted = conn.ring.head % (1 << 20)
        await asyncio.wait_for(conn.sync(), 5)
        # a settle (a run's end) frees the ring without anyone waiting: sent only after ring writes
        tail = conn.ring.tail
        conn.settle()
        unsent = (conn.marks == {})
        conn.send(0, 1, 2, (len(arrays) + 1,), arrays[1], None, "")  # small: not in the ring
        conn.settle()
        unsent &= conn.marks == {}
        conn.send(0, 1, 2, (len(arrays) + 2,), arrays[2], None, "")
        conn.settle()
        for _ in range(500):
            if conn.ring.tail > tail and not conn.marks:
                break
            await asyncio.sleep(0.01)
        settled = (unsent, conn.ring.tail == conn.ring.head and conn.ring.tail > tail, conn.refused)
        conn.close()
        listener.close()
        return got, offsets, files_after_sync, restarted, settled

    got, head, files, restarted, settled = _run(main())
    assert settled == (True, True, {})
    assert [g[3] for g in got] == [(k,) for k in range(len(arrays) + 3)]
    for g, a in zip(got, arrays + [arrays[0]]):
        assert g[4].dtype == a.dtype and g[4].tobytes() == a.tobytes()
    assert head == 400_000 + 400_064  # two big bodies in the ring; the next two found no room: the socket
    assert files == [] and restarted == -(-arrays[0].nbytes // 64) * 64  # unlinked; the ring starts over


async def _cma_agreed(conn) -> None:
    """Wait for the receiver's answer to the connection's probe (or fail after 5 s)."""
    for _ in range(500):
        if conn.cma:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the receiver never agreed to read the sender's memory")


def test_mid_sized_bodies_are_read_from_the_senders_memory(tmp_path, monkeypatch):
    """Where the kernel lets a receiver read its sender's memory (the probe on opening asks), a
    body from RING_MIN up to SHM_BYTES is read straight into the place offered for it, with no
    ring; one with no place yet arrives as a ``Lent``, read when its receiver names the place
    (``fetch``) or let go unread (``release``). The sender keeps each array, and reports its memory
    lent, until the receiver says it has done with it. Every array arrives exact."""
    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))
    base = np.arange(600_000, dtype=np.float32)
    arrays = {0: base[:100_000], 1: base[100_000:400_000].reshape(300, 1000), 2: np.arange(10, dtype=np.int8),
              3: base[400_000:]}
    places = {1: np.empty((300, 1000), np.float32)}

    async def main():
        got = {}
        listener, conn = await _keyed(got, places)
        await _cma_agreed(conn)
        for k, a in arrays.items():
            conn.send(0, 1, 2, (k,), a, None, "")
        sent = sorted(a.size for a in conn.lent.values())
        await asyncio.wait_for(conn.sync(), 5)
        unread = (sorted(a.size for a in conn.lent.values()), conn.lends(base), type(got[0]), type(got[3]))
        fetched = got[0].fetch()
        got[3].release()
        await asyncio.wait_for(conn.sync(), 5)
        after = (dict(conn.lent), conn.lends(base), conn.ring)
        conn.close()
        listener.close()
        return got, fetched, sent, unread, after

    got, fetched, sent, unread, after = _run(main())
    assert sent == [100_000, 200_000, 300_000]  # the mid-sized views of base
    assert unread == ([100_000, 200_000], True, Lent, Lent)  # the placed one was read at once
    assert fetched.tobytes() == arrays[0].tobytes() and fetched.base is None
    for k in (1, 2):
        assert got[k].dtype == arrays[k].dtype and got[k].tobytes() == arrays[k].tobytes()
    assert got[1] is places[1]
    assert after == ({}, False, None)  # read or released, and let go; no ring was made


def test_frames_cross_tcp_to_another_node_with_every_body_in_the_stream(tmp_path, monkeypatch):
    """A peer of another node connects to the listener's TCP address: the same frames, in order
    and exact, a mid-sized body in the stream rather than a ring (no shared memory across nodes)."""
    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))
    arrays = [np.arange(12, dtype=np.float32), np.arange(100_000, dtype=np.float64), np.arange(3 << 18, dtype=np.int32)]

    async def main():
        got = []
        listener = Listener(b"s" * 16, lambda *a: (got.append(a[4]), "ok")[1], tcp_host="127.0.0.1")
        await listener.start()
        assert listener.tcp_address.startswith("tcp:127.0.0.1:")
        conn = Connection(listener.tcp_address, b"s" * 16)
        assert conn.shared_prefix is None
        for k, a in enumerate(arrays):
            conn.send(0, 1, 2, (k,), a, None, "")
        await asyncio.wait_for(conn.sync(), 5)
        assert conn.ring is None and os.listdir(tmp_path) == []
        wrong = Connection(listener.tcp_address, b"w" * 16)  # the secret guards TCP as it does Unix sockets
        wrong.send(0, 1, 2, (9,), arrays[0], None, "")
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(wrong.sync(), 5)
        conn.close()
        listener.close()
        return got

    got = _run(main())
    assert [g.tobytes() for g in got] == [a.tobytes() for a in arrays]


def test_a_frame_header_is_plain_data_never_a_pickle(tmp_path):
    """A header is read as msgpack: bytes that would run code when unpickled are refused as a
    malformed header, and nothing runs."""
    import pickle

    import msgpack
    import pytest

    from simshard.runtime.wire.frames import Header, Storage, Stored, decode_header, encode_header

    header = Header(5, 3, 1, 2, (17, 0), ("all_reduce", (0, 1), "sum", None, "<f4"), "at position 3", "<f4",
                    (4, 8), Stored(Storage.RING, "simshard-0-p1-ring-ab", 4096))
    assert decode_header(encode_header(header)) == header
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with pytest.raises((ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError)):
        decode_header(pickle.dumps((5, 3, 1, 2, Payload())))
    assert not marker.exists()


def test_a_senders_remembered_headers_read_back_as_the_headers_sent():
    """``HeaderEncoder`` packs a message's unchanging fields once and writes only the sequence
    number and run per frame: every frame still reads back as the header it was, whatever the two
    numbers (up to 64 bits), a shared-memory body's header (never remembered) included, and it
    forgets everything past ``KEEP`` headers rather than grow."""
    from simshard.runtime.wire.frames import Header, HeaderEncoder, Storage, Stored, decode_header, encode_header

    encoder = HeaderEncoder()
    tag = ("all_reduce", (0, 1), "sum", (4, 8), "<f4")
    for seq, run_id in ((0, 0), (1, 7), (2**40, 3), (2**64 - 1, 2**63), (5, 1)):
        header = Header(seq, run_id, 1, 2, (17, 0), tag, "at position 3", "<f4", (4, 8), None)
        assert decode_header(encoder.encode(*header)) == header == decode_header(encode_header(header))
    assert len(encoder.rest) == 1  # one message, many frames
    stored = Header(9, 4, 1, 2, (17, 0), tag, "at position 3", "<f4", (4, 8), Stored(Storage.RING, "ring-ab", 4096))
    assert decode_header(encoder.encode(*stored)) == stored and len(encoder.rest) == 1
    encoder.KEEP = 3
    for k in range(5):
        header = Header(k, 1, 1, 2, (k, 0), tag, "", "<f4", (4, 8), None)
        assert decode_header(encoder.encode(*header)) == header
    assert len(encoder.rest) <= 3


def test_a_frame_naming_a_dtype_of_python_objects_is_refused_and_nothing_is_delivered():
    """Raw bytes are never Python objects: a frame whose header names an object dtype (its body
    would be pointers of the sender's) closes the connection before anything is handed on, the
    frames after it included; a dtype is checked once per connection and remembered."""
    from simshard.runtime.wire.receiver import Receiver

    async def main():
        got = []
        listener = Listener(b"s" * 16, lambda *message: got.append(message) or "ok")
        await listener.start()
        conn = Connection(listener.address, b"s" * 16)
        conn.send(7, 1, 2, (0, 0), np.array([None, 1], dtype=object), None, "")
        conn.send(7, 1, 2, (1, 0), np.ones(3, np.float32), None, "")
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(conn.sync(), 5)
        conn.close()
        listener.close()
        return got

    assert _run(main()) == []
    receiver = Receiver(b"s" * 16, lambda *message: "ok")
    assert receiver.dtype_of("<f4") is receiver.dtype_of("<f4") == np.dtype(np.float32)
    with pytest.raises(ValueError, match="holds Python objects"):
        receiver.dtype_of("|O")
    assert "|O" not in receiver.dtypes
