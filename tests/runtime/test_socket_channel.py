"""The socket channel between device processes of one node (``runtime/socket_channel.py``), in
one process: frames carry any array exactly and in order, every frame is answered, a connection
without the mesh's secret delivers nothing, and a closed peer fails the waiting answers."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from simshard.runtime.socket_channel import Connection, Listener

ARRAYS = [np.arange(12, dtype=np.float32).reshape(3, 4), np.float64(2.5) * np.ones(()), np.zeros((0, 3), np.int32),
          np.array([True, False]), np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2]]  # the last not contiguous


def _run(coro):
    return asyncio.run(coro)


def test_frames_carry_every_array_exactly_and_in_order():
    async def main():
        got = []

        async def deliver(run_id, src, dst, key, array, tag, note):
            got.append((run_id, src, dst, key, array, tag, note))
            return "finished" if key == (99,) else "ok"

        listener = Listener(b"s" * 16, deliver)
        await listener.start()
        conn = Connection(listener.address, b"s" * 16)
        answers = [conn.send(7, 1, 2, (k, 0), a, ("tag", k), f"note {k}") for k, a in enumerate(ARRAYS)]
        answers.append(conn.send(7, 1, 2, (99,), np.ones(1), None, ""))
        assert await asyncio.gather(*answers) == ["ok"] * len(ARRAYS) + ["finished"]
        conn.close()
        listener.close()
        return got

    got = _run(main())
    assert [g[3] for g in got] == [(k, 0) for k in range(len(ARRAYS))] + [(99,)]  # in order
    for (run_id, src, dst, key, array, tag, note), want in zip(got, ARRAYS):
        assert (run_id, src, dst, tag, note) == (7, 1, 2, ("tag", key[0]), f"note {key[0]}")
        assert array.dtype == want.dtype and array.shape == want.shape and array.tobytes() == np.ascontiguousarray(want).tobytes()
        assert not array.flags.writeable  # a view of the frame, as a Ray object's is


def test_a_connection_without_the_secret_delivers_nothing_and_a_closed_peer_fails_its_answers():
    async def main():
        got = []

        async def deliver(*args):
            got.append(args)
            return "ok"

        listener = Listener(b"right secret 16b", deliver)
        await listener.start()
        wrong = Connection(listener.address, b"wrong secret 16b")
        answer = wrong.send(0, 1, 2, (0,), np.ones(3), None, "")
        with pytest.raises(ConnectionError, match="closed"):
            await asyncio.wait_for(answer, 5)
        listener.close()
        return got

    assert _run(main()) == []


def test_a_peer_that_is_not_listening_fails_the_send_not_hangs():
    async def main():
        conn = Connection("\0simshard-nobody-listens-here", b"x" * 16)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(conn.send(0, 0, 1, (0,), np.ones(2), None, ""), 5)

    _run(main())
