"""The driver's own socket to each device process of its node: run calls (and fetches of the
arrays a process keeps) without Ray.

A run is one call per device process and one summary back. As a Ray actor call it costs about a
millisecond each way (task submission, the hop onto the actor's event loop, the reply through the
object store), which a resident training step pays on every step while its devices compute for
a few milliseconds. The call is one small message each way, so each host process also listens on
an abstract Unix socket (``control_server.ControlServer``) and the driver keeps one connection
to it (``ControlLine``, here, with the protocol both ends share): it writes the run's plan and the input shards it passes by value (small numpy
arrays, as pickle-5 out-of-band buffers), the host answers with the run's summary, tagged with
the run id. Fetching the outputs a process keeps goes the same way, their bytes out of band on
the socket. Loading, aborting, asking where a device is and restarting stay Ray calls; hosts on
other nodes, and runs with shards in Ray's object store, are run by Ray calls too.

While the other end polls, a small frame goes instead by a ring of shared memory (``frame_rings``):
a run call where the host's loop polls (between a training loop's steps it lingers polling), an
answer where the driver polls for it (``wait``'s spin). The driver's ring and the host's are named
to each other once, by a call (``Request.RINGS``) answered before any other is written; a frame
with tag ``DOORBELL_TAG`` on the socket says "read the ring" to a reader that went to sleep.

Failures: a host whose process dies closes its end, and the driver reads the end of the stream
(``ControlLine.failed``), as Ray would report the actor dead. An exception ``run`` raises comes
back as the answer (``HostError``). An answer for a run the driver stopped waiting for (an aborted
attempt) is dropped when the next one is read.
"""

from __future__ import annotations

import logging
import pickle
import select
import socket
import struct
import time
from enum import Enum, IntEnum
from typing import Any, Callable, NamedTuple, Sequence

from .admission import NONCE_BYTES, respond
from .frame_rings import FrameRing, RingReader, RingReaders, new_ring, reader_of, rings_possible
from .preemption import step_aside
from .shared_memory import unlink_shared
from .stream_parts import Parser, PartReader

CALL_HEAD = struct.Struct("<qQI")  # tag, pickled bytes, number of out-of-band buffers
_LENGTH = struct.Struct("<Q")  # one out-of-band buffer's bytes
ANSWER_HEAD = struct.Struct("<qBQI")  # tag, kind, pickled (or raw) bytes, number of out-of-band buffers
CHUNK = 1 << 20  # bytes of an answer written at a time (the host's flow control: ``control_server.CallReader.write``)
IOV_PARTS = 512  # parts of one sendmsg (the kernel takes up to IOV_MAX, 1,024 on Linux)
INLINE_MAX = 1 << 20  # an input shard below this size goes on the line; a larger one through Ray's object store
DOORBELL_TAG = -1  # a frame of no body with this tag, either way: read the ring of frames (``frame_rings``)
RINGS_TAG = -2  # the call that names the rings to each other (run and fetch tags are 0 or more)
RINGS_SECONDS = 10.0  # how long the driver waits for the host to map its ring
LOG = logging.getLogger(__name__)


class Request(str, Enum):
    """The host's methods a driver calls on the line (a ``str`` enum: the name is what travels,
    and a host's table of methods may be keyed by either)."""

    RUN = "run"  # ``DeviceHost.run(plan, *inputs)``: a run's summary, pickled
    FETCH = "fetch"  # ``DeviceHost.fetch(ids)``: the arrays the host keeps under ``ids``
    RINGS = "rings"  # the line's own (``control_server.CallReader.open_rings``): the driver's ring
    # of calls named, the host's ring of answers named back (None: it has none)


class Payload(IntEnum):
    """What an answer's body holds (one byte on the wire)."""

    BYTES = 0  # bytes the method returned, as they are
    RAISED = 1  # the exception it raised, pickled by value
    OBJECT = 2  # the object it returned, pickled by value, arrays out of band


class RawAnswer(NamedTuple):
    """An answer as read off the socket, until its caller takes it."""

    payload: Payload
    body: bytearray
    buffers: list
    by_ring: bool  # whether it came by the host's ring of answers (``ControlLine.open_rings``)


class OutcomeKind(Enum):
    """How a call on a line ended."""

    VALUE = "value"  # the method returned
    ERROR = "error"  # the method raised
    DEAD = "dead"  # the line broke: the host process is gone


class Outcome(NamedTuple):
    """What became of a call: its kind and what came with it (the value, the exception raised,
    or the broken line's error)."""

    kind: OutcomeKind
    value: Any


class RingNames(NamedTuple):
    """The host's answer to the driver naming its ring of calls (``Request.RINGS``)."""

    calls_read: bool  # whether the host reads the driver's ring (else its calls all go on the socket)
    answers: str | None  # the host's ring of answers, for the driver to read (None: it has none)


class HostError(Exception):
    """What a host's method raised, carried back on the line."""


def frame_parts(head: bytes, body: bytes, buffers: Sequence[pickle.PickleBuffer]) -> tuple[list, list]:
    """A frame's parts: its head with the out-of-band buffers' lengths, its body, the buffers
    (their memory, not copies)."""
    raws = [b.raw() for b in buffers]
    return [head + b"".join(_LENGTH.pack(r.nbytes) for r in raws), body], raws


def frames(head: struct.Struct, came: Callable[[tuple, bytearray, list], None]) -> Parser:
    """The parser of one direction's frames (``stream_parts``): ``head`` (its last two fields the
    body's bytes and the number of out-of-band buffers), their lengths, the body, the buffers;
    each whole frame handed to ``came(head fields, body, buffers)``."""
    while True:
        fields = head.unpack((yield head.size))
        nbody, nbuf = fields[-2:]
        lengths = [n for (n,) in _LENGTH.iter_unpack((yield _LENGTH.size * nbuf))]
        body = yield nbody
        buffers = []
        for n in lengths:
            buffers.append((yield n))
        came(fields, body, buffers)


def send_parts(sock: socket.socket, parts: Sequence) -> None:
    """Write ``parts`` (bytes-like) on a blocking socket in as few system calls as it takes (one
    ``sendmsg`` each time, of at most ``IOV_PARTS`` parts), without joining them."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        sent = sock.sendmsg(views[:IOV_PARTS])
        while views and sent >= views[0].nbytes:
            sent -= views.pop(0).nbytes
        if sent:
            views[0] = views[0][sent:]


def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    """``n`` bytes from a blocking socket; EOFError at the end of the stream."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError("the host process closed its end")
        got += k
    return buf


class ControlLine:
    """The driver's end of one host process's line (a blocking socket). ``send`` writes a call of
    one of the host's methods ("run", "fetch"), tagged; ``answers`` collects what came back, by
    tag; ``failed`` is set once the line broke (the host process died, or closed it)."""

    def __init__(self, address: str, secret: bytes, timeout: float = 10.0):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(address)
            # the host's challenge, answered: the secret itself never crosses the socket
            nonce = _recv_exactly(self.sock, NONCE_BYTES)
            self.sock.sendall(respond(secret, nonce))
        except (OSError, EOFError) as e:  # (closed before its challenge: the host's listener is full)
            self.sock.close()
            raise ConnectionError(f"the device process's control line ({address[1:]}) did not open: {e}") from e
        self.sock.settimeout(None)
        self.answers: dict[int, RawAnswer] = {}
        self.reader = PartReader(frames(ANSWER_HEAD, self._answer_came))  # answers parsed off the stream
        self.failed: BaseException | None = None
        self.calls_ring: FrameRing | None = None  # small calls, while the host polls (``open_rings``)
        self.answers_ring: RingReader | None = None  # small answers, while ``wait`` polls

    def open_rings(self, prefix: str | None) -> None:
        """Name a ring of calls to the host and map the ring of answers it names back (module
        docstring); each direction goes by its ring from then on where the other end can read it.
        None of it where the node cannot (``rings_possible``, ``prefix`` None: no shared memory);
        where it fails, a warning, and the socket carries that direction's every frame."""
        if prefix is None or not rings_possible() or self.failed is not None:
            return
        ring = new_ring(prefix, f"the run calls to {self.address[1:]}")
        if ring is None:
            return
        try:
            self.send(RINGS_TAG, Request.RINGS, (ring.name,))
            named = wait([self], RINGS_TAG, RINGS_SECONDS) == [self] and self.outcome(RINGS_TAG)
        finally:
            ring.unlink()  # mapped by now, or never to be
        if not named or named.kind is not OutcomeKind.VALUE:
            LOG.warning("simshard control line: %s did not name its rings (%s): its frames go on the socket",
                        self.address[1:], named and named.value)
            return
        names: RingNames = named.value
        self.calls_ring = ring if names.calls_read else None
        if names.answers is not None:
            self.answers_ring = reader_of(names.answers, prefix, PartReader(frames(ANSWER_HEAD, self._ring_answer_came)),
                                          f"the answers of {self.address[1:]}")
            if self.answers_ring is not None:  # (a name not of the mesh refused before anything is unlinked)
                unlink_shared(names.answers)  # mapped: its name is no longer needed

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, tag: int, method: "Request | str", args: Sequence) -> None:
        """Write call ``tag``: ``await method(*args)`` on the host (``DeviceHost.run(plan,
        *inputs)``, say); ``write(frame(...))``."""
        self.write(self.frame(tag, method, args))

    @staticmethod
    def frame(tag: int, method: "Request | str", args: Sequence) -> list:
        """Call ``tag``'s frame, as parts ready to write: a numpy array is pickled as a reference to
        its memory, which goes out after the frame without a copy; the same array named twice goes
        once (pickle's memo). Made apart from ``write`` so that a run's calls are all made before
        the first is written, and then go out back to back (``LineRoute.send``)."""
        buffers: list[pickle.PickleBuffer] = []
        name = method.value if isinstance(method, Request) else method  # a plain str: no class to unpickle
        body = pickle.dumps((name, tuple(args)), protocol=5, buffer_callback=buffers.append)
        parts, raws = frame_parts(CALL_HEAD.pack(tag, len(body), len(buffers)), body, buffers)
        return [*parts, *raws]

    def write(self, frame: list) -> bool:
        """Write a call's ``frame``, by ring where it may go so (``open_rings``); whether it went by
        ring. A write that fails breaks the line (``failed``)."""
        if self.failed is not None:
            return False  # the wait reports the line broken
        if self.calls_ring is not None and self.calls_ring.offer(frame, self._doorbell):
            return True
        self._send(frame)
        return False

    def _send(self, frame: list) -> None:
        try:
            send_parts(self.sock, frame)
        except OSError as e:
            self._break(e)

    def _doorbell(self) -> None:
        self._send([CALL_HEAD.pack(DOORBELL_TAG, 0, 0)])

    def read(self) -> None:
        """What has come on the socket (the caller saw it readable): every answer now whole into
        ``answers``; ``failed`` at the end of the stream or on an error."""
        try:
            got = self.sock.recv_into(self.reader.get_buffer())
            if got == 0:
                raise EOFError("the host process closed its end")
            self.reader.buffer_updated(got)
        except (OSError, EOFError) as e:
            self._break(e)

    def _answer_came(self, head: tuple, body: bytearray, buffers: list) -> None:
        tag, kind = head[:2]
        if tag == DOORBELL_TAG:
            self.answers_ring.drain()
        else:
            self.answers[tag] = RawAnswer(Payload(kind), body, buffers, False)

    def _ring_answer_came(self, head: tuple, body: bytearray, buffers: list) -> None:
        self.answers[head[0]] = RawAnswer(Payload(head[1]), body, buffers, True)

    def take(self, tag: int):
        """Call ``tag``'s answer, once it came: bytes the method returned, as they are (a run's
        pickled summary), or the object it returned (arrays it fetched: their memory read
        straight off the socket, each the caller's own); raises ``HostError`` with what the
        method raised."""
        payload, body, buffers, _ = self.answers.pop(tag)
        if payload is Payload.RAISED:
            raise HostError(pickle.loads(body))
        return bytes(body) if payload is Payload.BYTES else pickle.loads(body, buffers=buffers)

    def outcome(self, tag: int) -> Outcome:
        """What became of call ``tag`` once ``wait`` says it is ready: ``VALUE`` with what the
        method returned (as ``take`` gives it), ``ERROR`` with what it raised, or ``DEAD`` with the
        broken line's error (the host process is gone)."""
        if self.failed is not None:
            return Outcome(OutcomeKind.DEAD, self.failed)
        try:
            return Outcome(OutcomeKind.VALUE, self.take(tag))
        except HostError as e:
            return Outcome(OutcomeKind.ERROR, e.args[0])

    def _break(self, error: BaseException) -> None:
        self.failed = ConnectionError(f"the device process's control line ({self.address[1:]}) broke: {error}")
        self.close()

    def close(self) -> None:
        if self.answers_ring is not None:
            self.answers_ring.close()  # asleep for good: an answer still to come takes the socket
        try:
            self.sock.close()
        except OSError:
            pass


class Waiter:
    """The driver waiting on ``lines`` for their answers to call ``tag``, over as many waits as
    it takes (a run's answers come one or a few at a time): the poller and the lines' rings of
    answers set up once per call, not per wait. ``spin``: seconds each wait polls before it
    sleeps (``math.inf``: until an answer or the timeout; where the node has a core for the
    driver an answer then costs no wakeup: ``RayMesh.driver_spin``). The rings are read while it
    polls; they stay awake after a wait returns (the next reads what came meanwhile) and are put
    to sleep, then read once more, before it sleeps."""

    def __init__(self, lines: Sequence[ControlLine], tag: int, spin: float = 0.0):
        self.lines, self.tag, self.spin = tuple(lines), tag, spin
        self.poll = select.poll()  # not select(): a driver of many processes has descriptors past 1024
        self.by_fd = {ln.fileno(): ln for ln in self.lines if ln.failed is None}
        for fd in self.by_fd:
            self.poll.register(fd, select.POLLIN)
        self.rings = RingReaders.as_they_are(
            ln.answers_ring for ln in self.by_fd.values() if ln.answers_ring is not None)

    def wait(self, pending: Sequence[ControlLine], timeout: float | None) -> list[ControlLine]:
        """The lines of ``pending`` whose answer has come, or that broke, waiting up to ``timeout``
        seconds (None: for ever) for at least one. Answers to other calls are read and dropped."""
        tag, rings, aside = self.tag, self.rings, step_aside()
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        spin_until = now + self.spin
        if self.spin > 0:
            rings.wake()
        while True:
            if rings.awake and rings.drain():
                _drop_stale(self.lines, tag)
            ready = [ln for ln in pending if tag in ln.answers or ln.failed is not None]
            if ready:
                return ready
            now = time.monotonic()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                return []
            if now < spin_until and aside.may_poll():  # (not while another task wants the core: ``preemption``)
                wait_ms = 0
            elif rings.awake and rings.sleep():  # an answer came by ring as it was about to sleep
                _drop_stale(self.lines, tag)
                continue
            else:
                wait_ms = None if left is None else left * 1e3
            polled = self.poll.poll(wait_ms)
            if wait_ms != 0:
                aside.slept()  # (its wake-up's delay is no contention: ``preemption``)
            for fd, _ in polled:
                ln = self.by_fd[fd]
                ln.read()
                if ln.failed is not None:
                    self.poll.unregister(fd)
                _drop_stale((ln,), tag)


def wait(lines: Sequence[ControlLine], tag: int, timeout: float | None, spin: float = 0.0) -> list[ControlLine]:
    """``Waiter(lines, tag, spin).wait(lines, timeout)``: one wait for the answers to call ``tag``."""
    return Waiter(lines, tag, spin).wait(lines, timeout)


def _drop_stale(lines: Sequence[ControlLine], tag: int) -> None:
    """Drop the answers to calls other than ``tag``: calls given up on (an aborted run), which
    nobody waits for."""
    for ln in lines:
        for stale in [t for t in ln.answers if t != tag]:
            del ln.answers[stale]
