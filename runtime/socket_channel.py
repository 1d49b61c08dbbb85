"""Messages between device processes of one node over Unix sockets: the fast path of the Ray
data plane.

A Ray actor call costs the sender and the receiver hundreds of microseconds; the schedule is
static and the processes long-lived, so each host process opens one listening socket once
(``Listener``, an abstract Unix socket: no file to clean up) and its peers on the same node
connect to it on first use (``Connection``, one per pair of processes, shared by their devices).
A message is one frame: a sequence number, a pickled header (run, source, destination, key, tag,
note, dtype, shape) and the array's bytes; the receiver answers every frame with the answer its
device's ``deliver`` gave, so the sender still learns of a message that arrived after its receiver
had finished. Every connection starts with the mesh's secret, which the controller hands out with
the peers' addresses: another local process cannot inject messages.

Ray stays the control plane (load, run, abort, where) and carries what the sockets do not: arrays
from ``ray_transport.SOCKET_BYTES`` up (as Ray objects, put once and read in place by every receiver on the
node) and messages to other nodes.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import struct
from typing import Awaitable, Callable

import numpy as np

_FRAME = struct.Struct("<QII")  # sequence number, header bytes, body bytes
_ANSWER = struct.Struct("<QI")  # sequence number, answer bytes

Deliver = Callable[..., Awaitable[str]]  # (run_id, src, dst, key, array, tag, note) -> answer


class Listener:
    """This process's socket: frames in, each handed to ``deliver`` and answered."""

    def __init__(self, secret: bytes, deliver: Deliver):
        self.secret, self.deliver = secret, deliver
        self.address = "\0simshard-" + os.urandom(12).hex()  # abstract namespace: no file
        self.server = None

    async def start(self) -> str:
        self.server = await asyncio.start_unix_server(self._serve, path=self.address)
        return self.address

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if await reader.readexactly(len(self.secret)) != self.secret:
                return
            while True:
                seq, hn, bn = _FRAME.unpack(await reader.readexactly(_FRAME.size))
                run_id, src, dst, key, tag, note, dtype, shape = pickle.loads(await reader.readexactly(hn))
                body = await reader.readexactly(bn) if bn else b""
                array = np.frombuffer(body, dtype=dtype).reshape(shape)  # read-only, as a Ray object's view
                answer = (await self.deliver(run_id, src, dst, key, array, tag, note)).encode()
                writer.write(_ANSWER.pack(seq, len(answer)) + answer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the sending process went away, or this one is closing
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


class Connection:
    """This process's side of the socket to one peer process: ``send`` writes a frame at once (in
    order, after the connection opened) and returns a future of the receiver's answer."""

    def __init__(self, address: str, secret: bytes):
        self.address, self.secret = address, secret
        self.writer: asyncio.StreamWriter | None = None
        self.waiting: list[bytes] | None = []  # frames written before the connection opened
        self.answers: dict[int, asyncio.Future] = {}
        self.seq = itertools.count()
        self.failed: BaseException | None = None
        asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(self.address)
        except OSError as e:
            self._fail(e)
            return
        writer.write(self.secret)
        for frame in self.waiting:
            writer.write(frame)
        self.waiting, self.writer = None, writer
        await self._read_answers(reader)

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                seq, n = _ANSWER.unpack(await reader.readexactly(_ANSWER.size))
                answer = (await reader.readexactly(n)).decode()
                fut = self.answers.pop(seq, None)
                if fut is not None and not fut.done():
                    fut.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            self._fail(e)

    def _fail(self, error: BaseException) -> None:
        self.failed = ConnectionError(f"the socket to a peer process closed: {error}")
        for fut in self.answers.values():
            if not fut.done():
                fut.set_exception(self.failed)
        self.answers.clear()

    def send(self, run_id: int, src: int, dst: int, key, array: np.ndarray, tag, note: str) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            fut.set_exception(self.failed)
            return fut
        seq = next(self.seq)
        self.answers[seq] = fut
        array = np.asarray(array)
        header = pickle.dumps((run_id, src, dst, key, tag, note, array.dtype.str, array.shape))
        frame = _FRAME.pack(seq, len(header), array.nbytes) + header + array.tobytes()  # C order, any strides
        if self.writer is None:
            self.waiting.append(frame)
        else:
            self.writer.write(frame)
        return fut

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
