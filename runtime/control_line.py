"""The driver's own socket to each device process of its node: run calls without Ray.

A run is one call per device process and one summary back. As a Ray actor call it costs about a
millisecond each way (task submission, the hop onto the actor's event loop, the reply through the
object store), which a resident training step pays on every step while its devices compute for
a few milliseconds. The call is one small message each way, so each host process also listens on
an abstract Unix socket (``ControlServer``) and the driver keeps one connection to it
(``ControlLine``): it writes the run's plan and the input shards it passes by value (small numpy
arrays, as pickle-5 out-of-band buffers), the host answers with the run's summary, tagged with
the run id. Loading, aborting, asking where a device is and restarting stay Ray calls; hosts on
other nodes, and runs with shards in Ray's object store, are run by Ray calls too.

Failures: a host whose process dies closes its end, and the driver reads the end of the stream
(``ControlLine.failed``), as Ray would report the actor dead. An exception ``run`` raises comes
back as the answer (``HostError``). An answer for a run the driver stopped waiting for (an aborted
attempt) is dropped when the next one is read.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import pickle
import select
import socket
import struct
import time
from typing import Awaitable, Callable, Sequence

_REQUEST = struct.Struct("<qQI")  # run id, pickled bytes, number of out-of-band buffers
_LENGTH = struct.Struct("<Q")  # one out-of-band buffer's bytes
_ANSWER = struct.Struct("<qBQ")  # run id, kind (_SUMMARY or _RAISED), payload bytes
_SUMMARY, _RAISED = 0, 1
INLINE_MAX = 1 << 20  # an input shard below this size goes on the line; a larger one through Ray's object store


class HostError(Exception):
    """What a host's ``run`` raised, carried back on the line."""


def _recv_exactly(sock: socket.socket, n: int) -> bytearray | None:
    """``n`` bytes from a blocking socket; None at the end of the stream."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


class ControlLine:
    """The driver's end of one host process's line (a blocking socket). ``send`` writes a run;
    ``answers`` collects what came back, by run id; ``failed`` is set once the line broke (the
    host process died, or closed it)."""

    def __init__(self, address: str, secret: bytes, timeout: float = 10.0):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(address)
        self.sock.sendall(secret)
        self.sock.settimeout(None)
        self.answers: dict[int, tuple[int, bytes]] = {}
        self.failed: BaseException | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, run_id: int, plan: tuple, inputs: Sequence) -> None:
        """Write run ``run_id``: ``DeviceHost.run(plan, *inputs)`` on the host. A numpy array is
        pickled as a reference to its memory, which goes out after the frame without a copy; the
        same array named twice goes once (pickle's memo)."""
        if self.failed is not None:
            return  # the wait reports the line broken
        buffers: list[pickle.PickleBuffer] = []
        body = pickle.dumps((plan, tuple(inputs)), protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
        head = _REQUEST.pack(run_id, len(body), len(raws)) + b"".join(_LENGTH.pack(r.nbytes) for r in raws)
        try:
            for part in (head, body, *raws):
                self.sock.sendall(part)
        except OSError as e:
            self._break(e)

    def read(self) -> None:
        """One answer off the socket (the caller saw it readable): into ``answers``, or ``failed``."""
        try:
            head = _recv_exactly(self.sock, _ANSWER.size)
            payload = None if head is None else _recv_exactly(self.sock, _ANSWER.unpack(head)[2])
        except OSError as e:
            self._break(e)
            return
        if payload is None:
            self._break(EOFError("the host process closed its end"))
            return
        run_id, kind, _ = _ANSWER.unpack(head)
        self.answers[run_id] = (kind, bytes(payload))

    def take(self, run_id: int) -> bytes:
        """Run ``run_id``'s summary (the pickled bytes ``DeviceHost.run`` answered), once it came;
        raises ``HostError`` with what the host's ``run`` raised."""
        kind, payload = self.answers.pop(run_id)
        if kind == _RAISED:
            raise HostError(pickle.loads(payload))
        return payload

    def _break(self, error: BaseException) -> None:
        self.failed = ConnectionError(f"the device process's control line ({self.address[1:]}) broke: {error}")
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def wait(lines: Sequence[ControlLine], run_id: int, timeout: float | None) -> list[ControlLine]:
    """The lines whose answer to ``run_id`` has come, or that broke, waiting up to ``timeout``
    seconds (None: for ever) for at least one. Answers to other runs are read and dropped."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        ready = [ln for ln in lines if run_id in ln.answers or ln.failed is not None]
        if ready:
            return ready
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return []
        poll = select.poll()  # not select(): a driver of many processes has descriptors past 1024
        by_fd = {ln.fileno(): ln for ln in lines}
        for fd in by_fd:
            poll.register(fd, select.POLLIN)
        for fd, _ in poll.poll(None if left is None else left * 1e3):
            ln = by_fd[fd]
            ln.read()
            for stale in [r for r in ln.answers if r != run_id]:
                del ln.answers[stale]  # a run given up on (aborted): nobody waits for it


class ControlServer:
    """A host process's end: accepts the driver's connection (which must start with the mesh's
    secret) and answers each run written on it with ``await run(plan, *inputs)`` (pickled bytes),
    runs concurrently, each answer written whole."""

    def __init__(self, secret: bytes, run: Callable[..., Awaitable]):
        self.secret, self.run = secret, run
        self.address = "\0simshard-control-" + os.urandom(12).hex()  # abstract namespace: no file
        self.sock: socket.socket | None = None
        self.tasks: set[asyncio.Task] = set()

    async def start(self) -> str:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen()
        self.sock.setblocking(False)
        self._spawn(self._accept())
        return self.address

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self.sock)
            conn.setblocking(False)
            self._spawn(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()

        async def exactly(n: int) -> memoryview:
            buf = bytearray(n)
            view, got = memoryview(buf), 0
            while got < n:
                k = await loop.sock_recv_into(conn, view[got:])
                if k == 0:
                    raise EOFError
                got += k
            return view

        writing = asyncio.Lock()  # answers of concurrent runs go out one whole frame at a time
        try:
            if not hmac.compare_digest(bytes(await exactly(len(self.secret))), self.secret):
                return
            while True:
                run_id, nbody, nbuf = _REQUEST.unpack(await exactly(_REQUEST.size))
                lengths = [_LENGTH.unpack(await exactly(_LENGTH.size))[0] for _ in range(nbuf)]
                body = await exactly(nbody)
                # read-only: the shards are the run's inputs, which nothing writes into
                buffers = [(await exactly(n)).toreadonly() for n in lengths]
                self._spawn(self._answer(conn, writing, run_id, bytes(body), buffers))
        except (OSError, EOFError):  # the driver went
            return
        finally:
            conn.close()

    async def _answer(self, conn: socket.socket, writing: asyncio.Lock, run_id: int, body: bytes, buffers) -> None:
        import cloudpickle

        try:
            plan, inputs = pickle.loads(body, buffers=buffers)
            summary = await self.run(plan, *inputs)
            # by value where plain pickle refused (a failure's exception of a class defined where
            # it was raised)
            kind, payload = _SUMMARY, summary if isinstance(summary, bytes) else cloudpickle.dumps(summary)
        except Exception as e:
            kind, payload = _RAISED, _error_bytes(e)
        async with writing:
            try:
                await asyncio.get_running_loop().sock_sendall(conn, _ANSWER.pack(run_id, kind, len(payload)) + payload)
            except OSError:
                pass  # the driver went

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.sock is not None:
            self.sock.close()


def _error_bytes(error: Exception) -> bytes:
    """``error`` pickled by value; one that cannot be, as a RuntimeError with its text."""
    import cloudpickle

    try:
        return cloudpickle.dumps(error)
    except Exception:
        return cloudpickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"))
