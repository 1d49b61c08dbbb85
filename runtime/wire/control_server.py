"""The host process's end of the driver's control line (``control_line.py`` has the protocol and the
driver's end): ``ControlServer`` admits the driver's connection (the challenge, with the mesh's
secret: ``admission``) and ``CallReader`` parses the calls off it as they come (``stream_parts``),
each answered by a task of its own, its answer written in chunks under the transport's flow
control. Small calls may come, and small answers go, by rings of shared memory while the reading
end polls (``control_line``'s docstring; ``CallReader.open_rings``)."""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
from typing import Awaitable, Callable, Mapping, Sequence

import cloudpickle  # answers by value (a dependency of the package, neither Ray nor simshard)

from .admission import HANDSHAKE_SECONDS, RESPONSE_BYTES, Admissions, accept_forever, listening_socket, new_nonce, verified
from .control_line import (ANSWER_HEAD, CALL_HEAD, CHUNK, DOORBELL_TAG, Payload, Request, RingNames, frame_parts,
                           frames)
from .frame_rings import FrameRing, RingReader, RingReaders, new_ring, reader_of, rings_possible
from .shared_memory import shared_memory_prefix
from .stream_parts import PartReader


class ControlServer:
    """A host process's end: accepts the driver's connection (which must answer the challenge
    with the mesh's secret: ``admission``) and answers each call written on it with ``await
    methods[name](*args)``, calls running concurrently, each answer written whole."""

    def __init__(self, secret: bytes, methods: Mapping[str, Callable[..., Awaitable]],
                 on_driver_gone: Callable[[], None] | None = None, rings: RingReaders | None = None):
        self.secret, self.methods = secret, dict(methods)
        # the process's rings, read as its loop polls (``frame_rings``): the driver's ring of calls
        # joins them; None: no rings (every call and answer on the socket)
        self.rings = rings if rings_possible() else None
        self.prefix = shared_memory_prefix(secret)
        self.on_driver_gone = on_driver_gone  # called when a driver's line ends (it closed it, or died)
        self.address = "\0simshard-control-" + os.urandom(12).hex()  # abstract namespace: no file
        self.sock: socket.socket | None = None
        self.tasks: set[asyncio.Task] = set()
        self.admissions = Admissions()  # connections held (the driver's is one)
        self.loop: asyncio.AbstractEventLoop | None = None  # the host's loop, asked once (see ``spawn``)

    async def start(self) -> str:
        self.loop = asyncio.get_running_loop()
        self.sock = listening_socket(socket.AF_UNIX, self.address)
        self.spawn(accept_forever(self.sock, self.admissions, lambda conn: self.spawn(self._serve(conn))))
        return self.address

    def spawn(self, coro) -> None:
        """``coro`` as a task of the host's loop, cancelled by ``close``: made on the loop itself,
        since ``ensure_future`` asks for the running loop, a system call (getpid) each time."""
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        """Admit ``conn`` (the challenge), then answer the calls read off it until it closes."""
        loop = asyncio.get_running_loop()
        transport = None
        driver = False
        try:
            nonce = new_nonce()
            await loop.sock_sendall(conn, nonce)
            response = await asyncio.wait_for(_exactly(loop, conn, RESPONSE_BYTES), HANDSHAKE_SECONDS)
            if not verified(self.secret, nonce, response):
                return
            driver = True
            gone = loop.create_future()
            transport, _ = await loop.connect_accepted_socket(lambda: CallReader(self, gone), conn)
            await gone
        except (OSError, EOFError, asyncio.TimeoutError):  # the driver went (or never answered)
            return
        finally:
            if transport is not None:
                transport.close()
            else:
                conn.close()
            self.admissions.leave()
            if driver and self.on_driver_gone is not None:
                self.on_driver_gone()

    async def answer(self, line: "CallReader", tag: int, body: bytes, buffers) -> None:
        """Run call ``tag`` and write its answer whole on ``line`` (``CallReader.write``)."""
        out: list[pickle.PickleBuffer] = []
        try:
            method, args = pickle.loads(body, buffers=buffers)
            result = await (line.open_rings if method == Request.RINGS else self.methods[method])(*args)
            if isinstance(result, bytes):
                kind, payload = Payload.BYTES, result
            else:  # by value where plain pickle would refuse (an exception of a class defined where
                # it was raised); arrays' memory out of band, written without a copy
                kind, payload = Payload.OBJECT, cloudpickle.dumps(result, protocol=5, buffer_callback=out.append)
        except Exception as e:
            kind, payload, out = Payload.RAISED, _error_bytes(e), []
        parts, raws = frame_parts(ANSWER_HEAD.pack(tag, kind, len(payload), len(out)), payload, out)
        await line.write([b"".join(parts), *raws])

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.sock is not None:
            self.sock.close()


class CallReader(asyncio.BufferedProtocol):
    """The host's end of an admitted line: calls parsed off the stream (``stream_parts``), each
    answered by a task of its own (runs go on concurrently); ``gone`` resolves when the line
    closes."""

    def __init__(self, server: ControlServer, gone: asyncio.Future):
        self.server, self.gone = server, gone
        self.transport = None
        self.reader = PartReader(frames(CALL_HEAD, self._call_came))
        self.writing = asyncio.Lock()  # answers of concurrent runs go out one whole frame at a time
        self.drained: asyncio.Future | None = None  # while the transport's buffer is over its limit
        self.calls_ring: RingReader | None = None  # the driver's ring of small calls (``open_rings``)
        self.answers_ring: FrameRing | None = None  # this end's ring of small answers

    async def open_rings(self, name: str) -> RingNames:
        """Read the driver's ring of calls ``name`` as the process's loop polls, and make a ring of
        answers for the driver to read as it polls (``control_line.ControlLine.open_rings``)."""
        server = self.server
        if server.rings is None or server.prefix is None or self.calls_ring is not None:
            return RingNames(False, None)
        self.calls_ring = reader_of(name, server.prefix, PartReader(frames(CALL_HEAD, self._call_came)),
                                    "the driver's run calls")
        if self.calls_ring is None:
            return RingNames(False, None)
        server.rings.add(self.calls_ring)
        self.answers_ring = new_ring(server.prefix, "the answers to the driver")
        return RingNames(True, None if self.answers_ring is None else self.answers_ring.name)

    async def write(self, parts: Sequence) -> None:
        """Write ``parts`` as one frame: by ring where it may (a small frame, the driver polling,
        no frame on the socket half written), else in chunks of ``CHUNK`` bytes, each once the
        transport has room for it: an answer of large arrays is never copied whole into the
        transport's buffer (nothing when the driver has gone)."""
        ring = self.answers_ring
        if ring is not None and not self.writing.locked() and ring.offer(parts, self._doorbell):
            return  # (the driver counts it: ``RawAnswer.by_ring``)
        async with self.writing:
            for part in parts:
                view = memoryview(part).cast("B")
                for start in range(0, len(view), CHUNK):
                    if self.drained is not None:
                        await self.drained
                    if self.transport.is_closing():
                        return
                    self.transport.write(view[start:start + CHUNK])

    def pause_writing(self) -> None:
        if self.drained is None:
            self.drained = self.server.loop.create_future()

    def resume_writing(self) -> None:
        if self.drained is not None:
            self.drained.set_result(None)
            self.drained = None

    def _doorbell(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(ANSWER_HEAD.pack(DOORBELL_TAG, 0, 0, 0))

    def _call_came(self, head: tuple, body: bytearray, buffers: list) -> None:
        if head[0] == DOORBELL_TAG:
            self.calls_ring.drain()
            return
        # read-only: the shards are the run's inputs, which nothing writes into
        shards = [memoryview(b).toreadonly() for b in buffers]
        self.server.spawn(self.server.answer(self, head[0], bytes(body), shards))

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int):
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)

    def eof_received(self) -> None:
        return None  # close: the driver closed its end

    def connection_lost(self, exc) -> None:
        self.resume_writing()  # a writer waiting for room finds the transport closing
        if self.calls_ring is not None:
            self.server.rings.discard(self.calls_ring)
            self.calls_ring.close()
        if self.answers_ring is not None:
            self.answers_ring.unlink()  # (the driver removed its name once it mapped it)
        if not self.gone.done():
            self.gone.set_result(None)


async def _exactly(loop: asyncio.AbstractEventLoop, conn: socket.socket, n: int) -> bytearray:
    """``n`` bytes from a non-blocking socket (the admission's challenge); EOFError at its end."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = await loop.sock_recv_into(conn, view[got:])
        if k == 0:
            raise EOFError
        got += k
    return buf


def _error_bytes(error: Exception) -> bytes:
    """``error`` pickled by value; one that cannot be, as a RuntimeError with its text."""
    try:
        return cloudpickle.dumps(error)
    except Exception:
        return cloudpickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"))
