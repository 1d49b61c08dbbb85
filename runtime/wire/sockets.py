"""Sockets between device processes (Unix sockets within a node, TCP between nodes): the fast
path of the Ray data plane.

Each host process opens one ``Listener`` (an abstract Unix socket: no file to clean up; a TCP
port for other nodes) and its peers connect to it on first use (``Connection``, one per pair of
processes, shared by their devices). Every connection starts by proving it knows the mesh's secret
(the listener's challenge answered: ``admission``). A send is a
write and nothing more: the receiver answers only a frame it refused, and a sync frame
(``Connection.sync``) settles every frame before it. A mid-sized body is lent (read from this
process's memory by the receiver: ``memory_reads``) or copied into the connection's ring; a large
one names its shared file (``shared_memory``). Between nodes (TCP) every frame and every answer
carries a MAC under keys the handshake derives (``frame_auth``): checked before anything of it is
handed on.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket

import numpy as np

from . import frame_auth
from .admission import NONCE_BYTES, Admissions, accept_forever, listening_socket, respond
from .frame_auth import MAC_BYTES, Signer, Verifier
from .frame_rings import FrameRing, RingReaders, new_ring, rings_possible
from .frames import (ANSWER, DOORBELL, FRAME, PROBE, SMALL, Answer, ErrorAnswer, HeaderEncoder, Storage, Stored,
                     decode_answer, widen)
from .memory_reads import array_owner, memory_reads_possible
from .receiver import Deliver, Place, Receiver, nowhere
from .shared_memory import RING_MIN, SHM_BYTES, Ring, shared_memory_prefix

async def dial(address: str) -> socket.socket:
    """A connected non-blocking socket to ``address`` (an abstract Unix socket, ``"\\0..."``, or
    ``tcp:host:port``), made and connected here and handed to the event loop whole: uvloop (which
    Ray runs async actors on wherever it is installed) refuses an abstract address given by name
    (EINVAL), but takes a socket connected to one, as asyncio's own loop does."""
    if address.startswith("tcp:"):
        host, port = address[4:].rsplit(":", 1)
        family, _, _, _, target = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0]
    else:
        family, target = socket.AF_UNIX, address
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, target)
    except BaseException:
        sock.close()
        raise
    return sock


class Listener:
    """This process's sockets: frames in, each handed to ``deliver`` (a plain function, called in
    stream order on the event loop). ``place`` (optional) names the array a frame's body is
    written into (the receiving device's offered place for it), given the frame's run, source,
    destination, key, dtype and shape; None, or no ``place``: a new array. Peers of this node
    connect to ``address`` (an abstract Unix socket); with ``tcp_host``, peers of other nodes to
    ``tcp_address`` (``tcp:host:port``, a port the kernel picks), the same frames with every body
    in the stream (no shared memory between nodes)."""

    def __init__(self, secret: bytes, deliver: Deliver, place: Place = nowhere, tcp_host: str | None = None):
        self.secret, self.deliver, self.place = secret, deliver, place
        self.address = "\0simshard-" + os.urandom(12).hex()  # abstract namespace: no file
        self.tcp_host, self.tcp_address = tcp_host, None
        self.sockets: list[socket.socket] = []
        self.admissions = Admissions()  # connections held, on both sockets together
        self.tasks: set[asyncio.Task] = set()  # the accept loops, and connections being set up
        # this node's peers' rings of frames, read while this process's loop polls (``frame_rings``)
        self.rings = RingReaders()

    async def start(self) -> str:
        self.sockets.append(listening_socket(socket.AF_UNIX, self.address))
        if self.tcp_host is not None:
            family = socket.getaddrinfo(self.tcp_host, 0, type=socket.SOCK_STREAM)[0][0]
            self.sockets.append(listening_socket(family, (self.tcp_host, 0)))
            host, port = self.sockets[-1].getsockname()[:2]
            self.tcp_address = f"tcp:{host}:{port}"
        for sock in self.sockets:
            self._spawn(accept_forever(sock, self.admissions, self._serve))
        return self.address

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _serve(self, conn: socket.socket) -> None:
        """An admitted connection: a ``Receiver`` reads it (it leaves ``admissions`` on closing)."""

        between_nodes = conn.family != socket.AF_UNIX  # (TCP: every frame authenticated)

        rings = None if between_nodes or not rings_possible() else self.rings

        def receiver():
            return Receiver(self.secret, self.deliver, self.place, on_close=self.admissions.leave,
                            authenticate_frames=between_nodes, rings=rings)

        async def attach():
            try:
                await asyncio.get_running_loop().connect_accepted_socket(receiver, conn)
            except OSError:
                conn.close()
                self.admissions.leave()

        self._spawn(attach())

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()


class Connection:
    """This process's side of the socket to one peer process: ``send`` writes a frame at once (in
    order, after the connection opened) and returns its sequence number. The receiver answers
    only a frame it refused; ``sync`` is answered once every frame before it has been handed on,
    and from then on ``answer`` tells what became of each of those frames. (No future per frame:
    a message costs the sender a write and nothing more.)"""

    def __init__(self, address: str, secret: bytes):
        self.address, self.secret = address, secret
        # None: no shared memory with the peer (another node, or none on this one)
        self.shared_prefix = None if address.startswith("tcp:") else shared_memory_prefix(secret)
        self.writer: asyncio.StreamWriter | None = None
        self.waiting: list[bytes] | None = []  # frames written before the connection opened
        self.refused: dict[int, Answer | ErrorAnswer] = {}  # seq -> why the receiver did not take that frame
        self.syncs: dict[int, asyncio.Future] = {}  # seq of a sync -> its future
        self.ring: Ring | None = None  # made on first use (needs the node's shared memory)
        # whether the receiver reads mid-sized bodies from this process's memory (its answer to
        # the probe sent on opening), and what it has yet to read: seq -> the array
        self.cma, self.lent = False, {}
        self.pid = os.getpid()  # named in each lent body's frame: asked once, not per frame (a system call)
        self._probe = np.frombuffer(bytearray(secret), dtype=np.uint8)  # what the probe points it at
        # small frames by shared memory while the receiver polls (``frame_rings``), once it has mapped it
        self.frames: FrameRing | None = None
        self.frames_read, self.ringed = False, 0  # (how many frames went by it)
        self.marks: dict[int, int] = {}  # seq of a sync -> how far the ring was written when it was sent
        self.settled_at = 0  # how far the ring was written when the last sync was sent
        self.seq = itertools.count()
        self.headers = HeaderEncoder()  # the loop's thread alone sends
        self.failed: BaseException | None = None
        # between nodes: this side's frames signed, the receiver's answers checked (``frame_auth``)
        self.signer: Signer | None = None
        self.verifier: Verifier | None = None
        self.opened = asyncio.get_running_loop().create_future()  # True once open, False if it could not be
        self.task = asyncio.ensure_future(self._open())

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = await dial(self.address)
        if self.address.startswith("tcp:"):
            return await asyncio.open_connection(sock=sock)
        return await asyncio.open_unix_connection(sock=sock)

    async def _open(self) -> None:
        writer = None
        try:
            reader, writer = await self._connect()
            nonce = await reader.readexactly(NONCE_BYTES)  # the listener's challenge
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError) as e:
            if writer is not None:  # (closed before its challenge: the listener is full)
                writer.close()
            if isinstance(e, asyncio.CancelledError):
                raise
            self._fail(e, "did not open")
            self.opened.set_result(False)
            return
        self.opened.set_result(True)
        widen(writer.transport)
        writer.write(respond(self.secret, nonce))  # the secret itself never crosses the socket
        self.writer = writer
        if self.address.startswith("tcp:"):  # this connection's own keys: never the secret itself
            to_listener, to_sender = frame_auth.keys(self.secret, nonce)
            self.signer, self.verifier = Signer(to_listener), Verifier(to_sender)
        if self.shared_prefix and memory_reads_possible():
            probe = PROBE.pack(self.pid, self._probe.ctypes.data)
            self._put((FRAME.pack(next(self.seq), 0, len(probe)) + probe,))
        if self.shared_prefix and rings_possible():
            self._offer_ring()
        for frame in self.waiting:
            self._put((frame,))
        self.waiting = None
        await self._read_answers(reader)

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                head = await reader.readexactly(ANSWER.size)
                seq, n = ANSWER.unpack(head)
                data = await reader.readexactly(n)
                if self.verifier is not None:
                    mac = await reader.readexactly(MAC_BYTES)
                    if not self.verifier.check(self.verifier.take(), mac, (head, data)):
                        raise ConnectionError(f"an answer from the peer at {self.address} failed its MAC (changed, "
                                              "replayed or forged): the connection is closed")
                answer = decode_answer(data)
                if answer is Answer.SYNC:  # every frame before it was handed on, refusals answered already
                    self._synced(seq)
                    fut = self.syncs.pop(seq, None)  # (none for ``settle``'s)
                    if fut is not None and not fut.done():
                        fut.set_result(Answer.SYNC)
                elif answer is Answer.READ:
                    self.lent.pop(seq, None)
                elif answer in (Answer.CMA, Answer.NO_CMA):
                    self.cma = answer is Answer.CMA
                elif answer in (Answer.RING, Answer.NO_RING):
                    self._ring_answered(answer is Answer.RING)
                else:
                    self.refused[seq] = answer
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as e:  # (ValueError: no answer)
            self._fail(e)
            self.writer.close()

    def _synced(self, seq: int) -> None:
        """Sync ``seq`` was answered: the ring written before it has been copied out (its space is
        free again) and its file mapped, if ever it will be (the name is no longer needed)."""
        mark = self.marks.pop(seq, 0)
        if self.ring is not None:
            self.ring.free(mark)
            self.ring.unlink()

    def _fail(self, error: BaseException, what: str = "closed") -> None:
        self.failed = ConnectionError(f"the socket to a peer process {what}: {error or type(error).__name__}")
        for fut in self.syncs.values():
            if not fut.done():
                fut.set_exception(self.failed)
        self.syncs.clear()

    def _write(self, *parts) -> None:
        if self.failed is not None:
            return  # the peer process is gone: its devices' messages go nowhere (Ray reports it dead)
        if self.writer is None or self.waiting is not None:
            self.waiting.append(b"".join(parts))
        else:
            self._put(parts)

    def _put(self, parts) -> None:
        """Write a frame's parts (the first starts with its ``FRAME`` prefix); between nodes with
        its MAC after the prefix."""
        write = self.writer.transport.write  # (the stream writer's write only adds a call)
        if self.signer is not None:
            first = parts[0]
            mac = self.signer.sign(parts)
            parts = (first[:FRAME.size], mac, first[FRAME.size:], *parts[1:])
        for p in parts:
            write(p)

    def send(self, run_id: int, src: int, dst: int, key, array: np.ndarray, tag, note: str,
             shared: Stored | None = None) -> int:
        """A frame carrying ``array``, or only naming it when it is in shared memory already
        (``Storage.FILE``, from ``SharedBlocks.put``); its sequence number, for ``answer``."""
        seq = next(self.seq)
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        nbytes = array.nbytes
        if shared is None and RING_MIN <= nbytes < SHM_BYTES and self.shared_prefix:
            shared = self._lend(seq, array) if self.cma else self._into_ring(array)
        header = self.headers.encode(seq, run_id, src, dst, key, tag, note, array.dtype.str, array.shape, shared)
        if shared is not None:
            self._write(FRAME.pack(seq, len(header), 0) + header)
        elif nbytes < SMALL:
            frame = FRAME.pack(seq, len(header), nbytes) + header + array.tobytes()
            if not self._by_ring(frame):
                self._write(frame)
        else:  # no copy of a large body on this side (the kernel's copy is the only one)
            self._write(FRAME.pack(seq, len(header), nbytes) + header, memoryview(array.reshape(-1).view(np.uint8)))
        return seq

    def _offer_ring(self) -> None:
        """Make this connection's ring of frames and name it to the receiver, which answers
        whether it reads it (``Answer.RING``); until then every frame goes on the socket."""
        self.frames = new_ring(self.shared_prefix, f"the frames to the peer at {self.address}")
        if self.frames is None:
            return
        name = self.frames.name.encode()
        self._put((FRAME.pack(next(self.seq), 0, len(name)) + name,))

    def _ring_answered(self, read: bool) -> None:
        """The receiver mapped the ring (``read``) or could not; its name is no longer needed either
        way. Taken once: a second answer changes nothing."""
        if self.frames is None or self.frames_read:
            return
        self.frames.unlink()
        if read:
            self.frames_read = True
        else:
            self.frames = None

    def _by_ring(self, frame: bytes) -> bool:
        """Put a small frame in the ring instead of the socket, where the receiver reads it and
        polls now; whether it went (``FrameRing.offer``: its doorbell rings on the socket)."""
        if not (self.frames_read and self.failed is None and self.frames.offer((frame,), self._doorbell)):
            return False
        self.ringed += 1
        return True

    def _doorbell(self) -> None:
        self._put((FRAME.pack(next(self.seq), 0, DOORBELL) + bytes(DOORBELL),))

    def _lend(self, seq: int, array: np.ndarray) -> Stored:
        """Let the receiver read ``array`` from this process's memory (``Storage.CMA``: pid,
        address), keeping it alive until the receiver says it has (see ``lends``)."""
        self.lent[seq] = array
        return Stored(Storage.CMA, self.pid, array.ctypes.data)

    def lends(self, owner: np.ndarray) -> bool:
        """Whether the receiver has yet to read an array whose memory ``owner`` owns (it must not
        be written in place meanwhile)."""
        return any(array_owner(a) is owner for a in self.lent.values())

    def _into_ring(self, array: np.ndarray) -> Stored | None:
        """Copy ``array`` into this connection's ring (``Storage.RING``: its name, the offset), or
        None when the ring has no room (the body then crosses the socket)."""
        if self.ring is None:
            self.ring = Ring(self.shared_prefix)
        offset = self.ring.put(array)
        return None if offset is None else Stored(Storage.RING, self.ring.name, offset)

    def sync(self) -> asyncio.Future:
        """A frame the receiver answers once it has handed on every frame sent before it (a
        ``ConnectionError`` if the socket closes first); then ``answer`` knows those frames' fate."""
        fut = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            fut.set_exception(self.failed)
            return fut
        seq = next(self.seq)
        self.syncs[seq] = fut
        self.marks[seq] = self.settled_at = 0 if self.ring is None else self.ring.head
        self._write(FRAME.pack(seq, 0, 0))
        return fut

    def settle(self) -> None:
        """A sync nobody waits for, sent only where bodies went into the ring since the last one:
        its answer frees their space in the ring (``_synced``). A run's end calls it, so the ring
        is reused from run to run without any device waiting for a round trip."""
        if self.ring is None or self.failed is not None or self.ring.head == self.settled_at:
            return
        seq = next(self.seq)
        self.marks[seq] = self.settled_at = self.ring.head
        self._write(FRAME.pack(seq, 0, 0))

    def answer(self, seq: int) -> "Answer | ErrorAnswer":
        """What the receiver said of frame ``seq`` (``Answer.OK`` unless it refused it), once a
        later sync has been answered."""
        return self.refused.pop(seq, Answer.OK)

    def close(self) -> None:
        # (what is lent stays lent while this object lives: a receiver that still holds a frame
        # must never read memory the sender has given back)
        self.frames_read = False
        if self.writer is not None:
            self.writer.close()
        elif not self.opened.done():  # still opening (a peer that does not answer): stop trying
            self.task.cancel()
        if self.ring is not None:
            self.ring.unlink()
        if self.frames is not None:
            self.frames.unlink()
