"""Messages between device processes over sockets (Unix sockets within a node, TCP between
nodes): the fast path of the Ray data plane.

A Ray actor call costs the sender and the receiver hundreds of microseconds; the schedule is
static and the processes long-lived, so each host process opens one listening socket once
(``Listener``, an abstract Unix socket: no file to clean up) and its peers on the same node
connect to it on first use (``Connection``, one per pair of processes, shared by their devices).
Every connection starts with the mesh's secret, which the controller hands out with the peers'
addresses: another local process cannot inject messages.

A message is one frame: a sequence number, a pickled header (run, source, destination, key, tag,
note, dtype, shape) and the array's bytes. The receiver reads a body straight into the array it
hands on (no staging copy for a large one) and answers only what the sender must hear of: a frame
its device refused ("finished", "over", an error). The sender learns that everything else arrived
from a sync frame (``Connection.sync``): answered once every frame before it on the stream has
been handed on, so one answer per connection and run replaces one per message.

A mid-sized body (``RING_MIN`` up to ``SHM_BYTES``) does not cross the socket: the frame names
its address in the sender's memory and the receiver reads it from there (``process_vm_readv``: one
copy, by the kernel) into the place it offered for it, at once or, when the frame came first,
when it receives the message (``Lent``); then it tells the sender, which keeps the array until
then. A probe on opening asks whether the kernel lets the receiver read the sender's memory (its
ptrace rules decide); where it does not, the sender copies the body into the connection's ring of
shared memory while it has room (``Ring``), the frame names the offset, and the receiver copies it
out as it hands the frame on. A large array is written
once into a file of the node's shared memory (``SharedBlocks``, one file per array however many
peers it goes to, as one Ray object serves all its readers) and the frame names the file and the
reader's slot in it; the receiver maps it read-only and hands on a view of the mapping, so its
bytes are copied once instead of twice per receiver. A receiver clears its slot when the last
view of its mapping goes; the sender writes a file again once every slot is clear, so its pages
are warm (writing fresh pages of shared memory costs several times a copy).

A receiving device may offer the place a message belongs in (``Listener``'s ``place``: a slot of
a collective's output); a body, a ring's copy or a mapped file's then goes straight there.

Between nodes the frames are the same on a TCP socket (``Listener``'s ``tcp_address``), every body
in the stream. Ray stays the control plane (load, abort, where), but for run calls (``control_line.py``).
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import itertools
import mmap
import os
import pickle
import socket
import struct
import weakref
from enum import Enum
from typing import Callable, Hashable, NamedTuple

import numpy as np

_FRAME = struct.Struct("<QII")  # sequence number, header bytes (0: a sync frame), body bytes
_ANSWER = struct.Struct("<QI")  # sequence number, answer bytes
_PROBE = struct.Struct("<QQ")  # a probe frame's body: the sender's pid, the address of its copy of the secret
_STAGE = 1 << 18  # the receive buffer for frame prefixes, headers and small bodies
_IN_PLACE = 1 << 16  # a body from this size up is read straight into its array
_SMALL = 1 << 16  # a body below this size is sent in one write with its header
_BUFFER = 4 << 20  # the socket buffers asked for (see _widen)
SHM_DIR = "/dev/shm"  # the node's shared memory (Linux); without it every body goes through the socket
SHM_BYTES = 2 << 20  # an array from this size up travels in shared memory (SharedBlocks)
RING_BYTES = 16 << 20  # each connection's ring of shared memory (Ring), its pages touched as it is used
RING_MIN = 1 << 16  # a body from this size up to SHM_BYTES is read from the sender's memory, or goes through the ring
_ALIGN = 64  # ring offsets start on a cache line
READERS = 4096  # a shared file's first page: one byte per reader slot (1 while its mapping lives)
_GRAIN = 1 << 20  # shared files are made in whole MiB, so a file fits arrays of nearby sizes
POOL_BYTES = 256 << 20  # a device keeps its idle shared files up to this many bytes



class Answer(str, Enum):
    """What a receiver says on the socket (its text on the wire). A device's answer to a frame
    (``OK``, ``FINISHED``: it had completed the run; ``OVER``: it left the run) goes back only when
    it is not ``OK``; the others answer the sender's sync, probe and lent bodies. (A ``str`` enum:
    an answer equals its text, as the answers of Ray calls are texts.)"""

    OK = "ok"
    FINISHED = "finished"
    OVER = "over"
    SYNC = "sync"  # every frame before the sync has been handed on
    READ = "read"  # a lent body has been read (or will not be)
    CMA = "cma"  # the probe: this receiver may read the sender's memory
    NO_CMA = "no cma"  # ... or may not
    ERROR = "error"  # only inside an ``ErrorAnswer``, with what went wrong


class ErrorAnswer(NamedTuple):
    """A frame its receiving device could not take: what it raised, as text."""

    message: str

    @property
    def answer(self) -> Answer:
        return Answer.ERROR


def encode_answer(answer: "Answer | ErrorAnswer") -> bytes:
    """An answer's bytes on the wire (an error as ``error: <message>``)."""
    if isinstance(answer, ErrorAnswer):
        return f"{Answer.ERROR.value}: {answer.message}".encode()
    return answer.value.encode()


def decode_answer(data: bytes) -> "Answer | ErrorAnswer":
    """The answer ``encode_answer`` wrote."""
    text = data.decode()
    prefix = Answer.ERROR.value + ": "
    return ErrorAnswer(text[len(prefix):]) if text.startswith(prefix) else Answer(text)


class Storage(Enum):
    """Where a frame's body is when it does not follow the frame on the socket."""

    CMA = "cma"  # in the sender's memory: ``Stored.name`` its pid, ``at`` the address
    RING = "ring"  # in the sender's ring (``Ring``): the ring's file, at the offset
    FILE = "file"  # in a shared file (``SharedBlocks``): the file, ``at`` the reader's slot


class Stored(NamedTuple):
    """A body the frame names instead of carrying it (``Header.stored``)."""

    storage: Storage
    name: "str | int"
    at: int

    def to_wire(self) -> tuple:
        """As a plain tuple (a NamedTuple or enum pickles by reference: several times slower)."""
        return self.storage.value, self.name, self.at

    @classmethod
    def from_wire(cls, raw: tuple) -> "Stored":
        return cls(Storage(raw[0]), raw[1], raw[2])


class Header(NamedTuple):
    """A frame's header: its sequence number, the message's run, source and destination devices,
    key, tag and note, the array's dtype (``dtype.str``) and shape, and where its body is when it
    does not follow on the socket."""

    seq: int
    run_id: int
    src: int
    dst: int
    key: Hashable
    tag: Hashable
    note: str
    dtype: str
    shape: tuple
    stored: "Stored | None"


def encode_header(header: Header) -> bytes:
    """The header pickled as a plain tuple (a NamedTuple pickles by reference: 5 us, not 0.7)."""
    stored = None if header.stored is None else header.stored.to_wire()
    return pickle.dumps((*header[:-1], stored))


def decode_header(data) -> Header:
    """The header ``encode_header`` wrote."""
    *head, stored = pickle.loads(data)
    return Header(*head, None if stored is None else Stored.from_wire(stored))


# (run_id, src, dst, key, array, tag, note) -> the device's answer (an ``Answer`` or its text:
# "ok", or why not)
Deliver = Callable[..., "Answer | str"]
# (run_id, src, dst, key, dtype, shape) -> the array a frame's body goes into, or None (a new one)
Place = Callable[..., "np.ndarray | None"]


def _nowhere(*frame) -> None:
    return None


def _widen(transport) -> None:
    """Ask for socket buffers of a few MiB (the kernel caps them at net.core.wmem_max): a large
    frame then crosses in a few system calls instead of one per default-sized buffer."""
    sock = transport.get_extra_info("socket")
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, _BUFFER)
        except OSError:
            pass


class _Receiver(asyncio.BufferedProtocol):
    """One incoming connection: frames parsed from a staging buffer, large bodies received in
    place (into the array ``place`` names, the receiver's own place for it, or a new one), each
    frame handed to ``deliver`` in stream order."""

    def __init__(self, secret: bytes, deliver: Deliver, place: Place = _nowhere):
        self.secret, self.deliver, self.place = secret, deliver, place
        self.authed = False
        self.stage = bytearray(_STAGE)
        self.start = self.end = 0  # the unparsed bytes are stage[start:end]
        self.body: tuple | None = None  # (header, array, its bytes, bytes filled) of a body read in place
        self.rings: dict[str, np.ndarray] = {}  # the sender's ring (Ring), mapped on its first use
        self.reads: list[int] = []  # frames whose lent bodies were read this turn (``_read``)
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        _widen(transport)

    def get_buffer(self, sizehint: int):
        if self.body is not None:
            _, _, flat, filled = self.body
            return flat[filled:]
        if self.end == len(self.stage):
            self._compact(self.end - self.start + _STAGE // 4)
        return memoryview(self.stage)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.body is not None:
            header, array, flat, filled = self.body
            filled += nbytes
            if filled < len(flat):
                self.body = (header, array, flat, filled)
                return
            self.body = None
            self._hand_on(header, array)
            return
        self.end += nbytes
        try:
            self._parse()
        except Exception:  # a malformed stream: drop the connection rather than guess
            self.transport.close()

    def _compact(self, need: int) -> None:
        """Move the unparsed bytes to the front, in a larger buffer if ``need`` bytes do not fit
        (a new buffer: asyncio may still hold a view of the old one)."""
        rest = self.stage[self.start:self.end]
        if need > len(self.stage):
            self.stage = bytearray(max(need, 2 * len(self.stage)))
        self.stage[:len(rest)] = rest
        self.start, self.end = 0, len(rest)

    def _parse(self) -> None:
        stage = self.stage
        if not self.authed:
            if self.end - self.start < len(self.secret):
                return
            if bytes(stage[self.start:self.start + len(self.secret)]) != self.secret:
                self.transport.close()
                return
            self.authed = True
            self.start += len(self.secret)
        while self.end - self.start >= _FRAME.size:
            seq, hn, bn = _FRAME.unpack_from(stage, self.start)
            if hn == 0 and bn == 0:  # sync: every frame before it has been handed on
                self.start += _FRAME.size
                self._answer(seq, Answer.SYNC)
                continue
            if hn == 0:  # a probe (``Connection``): may this process read the sender's memory?
                if self.end - self.start < _FRAME.size + bn:
                    return
                pid, address = _PROBE.unpack_from(stage, self.start + _FRAME.size)
                self.start += _FRAME.size + bn
                self._answer(seq, Answer.CMA if probe_memory(pid, address, self.secret) else Answer.NO_CMA)
                continue
            head_end = self.start + _FRAME.size + hn
            if self.end < head_end:
                if head_end - self.start > len(stage):
                    self._compact(head_end - self.start)
                return
            have = self.end - head_end
            if bn > have and bn < _IN_PLACE:
                if head_end - self.start + bn > len(stage) - self.start:
                    self._compact(head_end - self.start + bn)
                return  # a small body not complete yet: wait for it in the stage
            header = decode_header(stage[self.start + _FRAME.size:head_end])
            dtype, shape, stored = header.dtype, header.shape, header.stored
            # a small body is copied out of the stage wherever it goes: not worth finding its place
            array = (self.place(header.run_id, header.src, header.dst, header.key, dtype, shape)
                     if bn >= _IN_PLACE or stored else None)
            if stored is not None:  # the body is in shared memory or the sender's (no bytes follow)
                self.start = head_end
                self._hand_on(header, self._from_shared(header.seq, stored, dtype, shape, array))
                continue
            if array is None:
                array = np.empty(shape, dtype=dtype)
            if array.nbytes != bn:
                raise ValueError(f"a frame's body has {bn} bytes for a {dtype}{list(shape)} array")
            flat = memoryview(array.reshape(-1).view(np.uint8)) if bn else memoryview(b"")
            got = min(bn, have)
            if got:
                flat[:got] = stage[head_end:head_end + got]
            self.start = head_end + got
            if got < bn:  # a large body: the rest goes straight into the array
                self.body = (header, array, flat, got)
                self.start = self.end = 0
                return
            self._hand_on(header, array)
        if self.start == self.end:
            self.start = self.end = 0

    def _from_shared(self, seq: int, stored: Stored, dtype, shape, array: np.ndarray | None) -> "np.ndarray | Lent":
        """A body that did not cross the socket: in the sender's memory (``Storage.CMA``: pid,
        address), read into the offered place, or left there (a ``Lent``) until the receiver names
        one; copied out of the sender's ring (``Storage.RING``: name, offset; its space is reused
        once this frame has been handed on) into the offered place if there is one; else its file
        mapped (``Storage.FILE``: name, slot), and copied into the offered place if there is one."""
        kind, name, at = stored
        if kind is Storage.CMA:  # one copy, by the kernel, into its place whenever that is known
            lent = Lent(dtype, shape, name, at, lambda: self._read(seq))
            return lent if array is None else lent.fetch(array)
        if kind is Storage.RING:
            offset = at
            ring = self.rings.get(name)
            if ring is None:
                ring = self.rings[name] = map_ring(name)
            if array is None:
                array = np.empty(shape, dtype=dtype)
            flat = array.reshape(-1).view(np.uint8)
            flat[...] = ring[offset:offset + flat.size]
            return array
        mapped = map_shared(name, dtype, shape, slot=at)
        if array is None:
            return mapped
        np.copyto(array, mapped)
        return array

    def _hand_on(self, header: Header, array: "np.ndarray | Lent") -> None:
        try:
            answer = Answer(self.deliver(header.run_id, header.src, header.dst, header.key, array, header.tag,
                                         header.note))
        except Exception as e:  # the receiving device could not take it: the sender hears why
            answer = ErrorAnswer(f"{type(e).__name__}: {e}")
        if answer is not Answer.OK:
            if isinstance(array, Lent):  # not taken: it will not be read
                array.release()
            self._answer(header.seq, answer)

    def _answer(self, seq: int, answer: "Answer | ErrorAnswer") -> None:
        if self.transport.is_closing():
            return  # the sender is gone: nobody to tell
        data = encode_answer(answer)
        self.transport.write(_ANSWER.pack(seq, len(data)) + data)

    def _read(self, seq: int) -> None:
        """Tell the sender frame ``seq``'s body has been read (or will not be): in one write with
        the others read in this turn of the event loop (a collective reads several at once)."""
        if not self.reads:
            asyncio.get_running_loop().call_soon(self._tell_reads)
        self.reads.append(seq)

    def _tell_reads(self) -> None:
        reads, self.reads = self.reads, []
        if not self.transport.is_closing():
            read = encode_answer(Answer.READ)
            self.transport.write(b"".join(_ANSWER.pack(seq, len(read)) + read for seq in reads))


class Lent:
    """A message's body still in its sender's memory: ``fetch`` reads it (one copy, by the kernel)
    into the place its receiver names, or a new array, and tells the sender it may let go;
    ``release`` tells it so without reading (a message nobody will receive). Either happens once.
    (A receiver that arrives after its message names the place only when it receives: the body
    waits for it in the sender's memory rather than being read twice.)"""

    __slots__ = ("dtype", "shape", "pid", "address", "_done")

    def __init__(self, dtype, shape, pid: int, address: int, done: Callable[[], None]):
        self.dtype, self.shape, self.pid, self.address = np.dtype(dtype), tuple(shape), pid, address
        self._done = done

    def fetch(self, into: np.ndarray | None = None) -> np.ndarray:
        """The body, read into ``into`` when it fits (the dtype and shape, C-contiguous), else a new array."""
        if self._done is None:
            raise RuntimeError("a lent body was read or released already")
        if into is None or into.dtype != self.dtype or into.shape != self.shape or not into.flags.c_contiguous:
            into = np.empty(self.shape, dtype=self.dtype)
        try:
            read_memory(self.pid, self.address, into)
        finally:
            self.release()
        return into

    def release(self) -> None:
        if self._done is not None:
            done, self._done = self._done, None
            done()


class Listener:
    """This process's sockets: frames in, each handed to ``deliver`` (a plain function, called in
    stream order on the event loop). ``place`` (optional) names the array a frame's body is
    written into (the receiving device's offered place for it), given the frame's run, source,
    destination, key, dtype and shape; None, or no ``place``: a new array. Peers of this node
    connect to ``address`` (an abstract Unix socket); with ``tcp_host``, peers of other nodes to
    ``tcp_address`` (``tcp:host:port``, a port the kernel picks), the same frames with every body
    in the stream (no shared memory between nodes)."""

    def __init__(self, secret: bytes, deliver: Deliver, place: Place = _nowhere, tcp_host: str | None = None):
        self.secret, self.deliver, self.place = secret, deliver, place
        self.address = "\0simshard-" + os.urandom(12).hex()  # abstract namespace: no file
        self.tcp_host, self.tcp_address = tcp_host, None
        self.servers: list = []

    async def start(self) -> str:
        loop = asyncio.get_running_loop()

        def receiver():
            return _Receiver(self.secret, self.deliver, self.place)

        self.servers.append(await loop.create_unix_server(receiver, path=self.address))
        if self.tcp_host is not None:
            server = await loop.create_server(receiver, host=self.tcp_host, port=0)
            self.servers.append(server)
            host, port = server.sockets[0].getsockname()[:2]
            self.tcp_address = f"tcp:{host}:{port}"
        return self.address

    def close(self) -> None:
        for server in self.servers:
            server.close()


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
        self._probe = np.frombuffer(bytearray(secret), dtype=np.uint8)  # what the probe points it at
        self.marks: dict[int, int] = {}  # seq of a sync -> how far the ring was written when it was sent
        self.seq = itertools.count()
        self.failed: BaseException | None = None
        self.opened = asyncio.get_running_loop().create_future()  # True once open, False if it could not be
        self.task = asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        try:
            if self.address.startswith("tcp:"):
                host, port = self.address[4:].rsplit(":", 1)
                reader, writer = await asyncio.open_connection(host, int(port))
            else:
                reader, writer = await asyncio.open_unix_connection(self.address)
        except OSError as e:
            self._fail(e)
            self.opened.set_result(False)
            return
        self.opened.set_result(True)
        _widen(writer.transport)
        writer.write(self.secret)
        if self.shared_prefix and memory_reads_possible():
            probe = _PROBE.pack(os.getpid(), self._probe.ctypes.data)
            writer.write(_FRAME.pack(next(self.seq), 0, len(probe)) + probe)
        for frame in self.waiting:
            writer.write(frame)
        self.waiting, self.writer = None, writer
        await self._read_answers(reader)

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                seq, n = _ANSWER.unpack(await reader.readexactly(_ANSWER.size))
                answer = decode_answer(await reader.readexactly(n))
                fut = self.syncs.pop(seq, None) if answer is Answer.SYNC else None
                if fut is not None:  # every frame before it was handed on, refusals answered already
                    self._synced(seq)
                    if not fut.done():
                        fut.set_result(Answer.SYNC)
                elif answer is Answer.READ:
                    self.lent.pop(seq, None)
                elif answer in (Answer.CMA, Answer.NO_CMA):
                    self.cma = answer is Answer.CMA
                else:
                    self.refused[seq] = answer
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            self._fail(e)

    def _synced(self, seq: int) -> None:
        """Sync ``seq`` was answered: the ring written before it has been copied out (its space is
        free again) and its file mapped, if ever it will be (the name is no longer needed)."""
        mark = self.marks.pop(seq, 0)
        if self.ring is not None:
            self.ring.free(mark)
            self.ring.unlink()

    def _fail(self, error: BaseException) -> None:
        self.failed = ConnectionError(f"the socket to a peer process closed: {error}")
        for fut in self.syncs.values():
            if not fut.done():
                fut.set_exception(self.failed)
        self.syncs.clear()

    def _write(self, *parts) -> None:
        if self.failed is not None:
            return  # the peer process is gone: its devices' messages go nowhere (Ray reports it dead)
        if self.writer is None:
            self.waiting.append(b"".join(parts))
        else:
            write = self.writer.transport.write  # (the stream writer's write only adds a call)
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
        header = encode_header(Header(seq, run_id, src, dst, key, tag, note, array.dtype.str, array.shape, shared))
        if shared is not None:
            self._write(_FRAME.pack(seq, len(header), 0) + header)
        elif nbytes < _SMALL:
            self._write(_FRAME.pack(seq, len(header), nbytes) + header + array.tobytes())
        else:  # no copy of a large body on this side (the kernel's copy is the only one)
            self._write(_FRAME.pack(seq, len(header), nbytes) + header, memoryview(array.reshape(-1).view(np.uint8)))
        return seq

    def _lend(self, seq: int, array: np.ndarray) -> Stored:
        """Let the receiver read ``array`` from this process's memory (``Storage.CMA``: pid,
        address), keeping it alive until the receiver says it has (see ``lends``)."""
        self.lent[seq] = array
        return Stored(Storage.CMA, os.getpid(), array.ctypes.data)

    def lends(self, owner: np.ndarray) -> bool:
        """Whether the receiver has yet to read an array whose memory ``owner`` owns (it must not
        be written in place meanwhile)."""
        return any(_owner(a) is owner for a in self.lent.values())

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
        self.marks[seq] = 0 if self.ring is None else self.ring.head
        self._write(_FRAME.pack(seq, 0, 0))
        return fut

    def answer(self, seq: int) -> "Answer | ErrorAnswer":
        """What the receiver said of frame ``seq`` (``Answer.OK`` unless it refused it), once a
        later sync has been answered."""
        return self.refused.pop(seq, Answer.OK)

    def close(self) -> None:
        # (what is lent stays lent while this object lives: a receiver that still holds a frame
        # must never read memory the sender has given back)
        if self.writer is not None:
            self.writer.close()
        elif not self.opened.done():  # still opening (a peer that does not answer): stop trying
            self.task.cancel()
        if self.ring is not None:
            self.ring.unlink()


class Ring:
    """A sender's ring of shared memory on one connection (a file of the node's shared memory,
    mapped by both processes). A body is copied into it and its frame names the offset; the
    receiver copies it out, into its place, as it hands the frame on. Both copies are plain
    copies between mapped pages, where a body through the socket costs the kernel's two copies,
    its buffers and a wakeup of the receiver every few dozen KiB, and a file per message costs
    fresh pages every time. The space of a body is written again only once a sync sent after it
    has been answered (``free``). ``RING_BYTES`` bounds it; a body that finds no room crosses the
    socket instead."""

    def __init__(self, prefix: str):
        self.name = f"{prefix}-ring-{os.urandom(8).hex()}"  # the mesh's prefix: a leftover is found
        self.bytes = np.frombuffer(_new_shared_file(self.name, RING_BYTES), dtype=np.uint8)
        self.linked = True
        self.head = self.tail = 0  # positions (offset + laps x RING_BYTES): [tail, head) may be unread

    def put(self, array: np.ndarray) -> int | None:
        """Copy ``array`` (C-contiguous) in after what was written last: its offset, or None when
        the unread bodies leave no room for it."""
        n = array.nbytes
        start = self.head
        if self.tail >= start or start % RING_BYTES + n > RING_BYTES:
            # all read, or it would wrap: start at the beginning (where the pages are mapped already)
            start = -(-start // RING_BYTES) * RING_BYTES
        if start + n - self.tail > RING_BYTES:
            return None
        offset = start % RING_BYTES
        self.bytes[offset:offset + n] = array.reshape(-1).view(np.uint8)
        self.head = start + -(-n // _ALIGN) * _ALIGN
        return offset

    def free(self, upto: int) -> None:
        """Everything written before position ``upto`` has been copied out."""
        self.tail = max(self.tail, upto)

    def unlink(self) -> None:
        """Remove the file's name (both mappings stay)."""
        if self.linked:
            self.linked = False
            _unlink(self.name)


def _new_shared_file(name: str, nbytes: int) -> mmap.mmap:
    """A new file ``name`` of ``nbytes`` in the node's shared memory, mapped read-write (only
    this process's user may open it)."""
    fd = os.open(os.path.join(SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


class _File:
    """One shared file of a ``SharedBlocks``: a page of reader slots, then the body."""

    def __init__(self, prefix: str, capacity: int):
        self.name = f"{prefix}-{os.urandom(8).hex()}"  # unique across the devices of a process
        self.capacity = capacity
        self.mm = _new_shared_file(self.name, READERS + capacity)
        self.slots = np.frombuffer(self.mm, dtype=np.uint8, count=READERS)
        self.body = np.frombuffer(self.mm, dtype=np.uint8, offset=READERS)

    def idle(self) -> bool:
        return not self.slots.any()

    def remove(self) -> None:
        _unlink(self.name)


class SharedBlocks:
    """A device's files of the node's shared memory for arrays from ``SHM_BYTES`` up, kept from
    run to run: ``put`` writes an array once per instruction (by identity: an all-gather's block
    sent to seven peers is one file, each peer a slot in it) into an idle file, one whose every
    reader has let go of its mapping. Idle files beyond ``POOL_BYTES`` are removed; the driver
    removes the rest, by the mesh's prefix, when the mesh closes."""

    def __init__(self, prefix: str):
        self.prefix = prefix  # the mesh's: what is left after a crash can be found and removed
        self.files: list[_File] = []
        self.scope, self.written = None, {}  # id(array) -> [array, file, next slot] within one instruction

    def put(self, array: np.ndarray, scope=None) -> Stored:
        """A file holding ``array`` for one more reader (``Storage.FILE``: its name, the reader's
        slot), written on the array's first ``put`` in ``scope`` (an instruction)."""
        if scope != self.scope:
            self.scope, self.written = scope, {}
        hit = self.written.get(id(array))
        if hit is None or hit[2] == READERS:
            flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            file = self._idle(flat.size)
            file.body[:flat.size] = flat
            hit = self.written[id(array)] = [array, file, 0]  # the array kept: its id is not reused meanwhile
        _, file, slot = hit
        file.slots[slot] = 1  # before the frame goes: the receiver clears it
        hit[2] += 1
        return Stored(Storage.FILE, file.name, slot)

    def _idle(self, nbytes: int) -> _File:
        """The smallest idle file that fits ``nbytes`` and this instruction has not written, or a
        new one (after removing idle files beyond ``POOL_BYTES``)."""
        busy = {id(f) for _, f, _ in self.written.values()}
        idle = [f for f in self.files if id(f) not in busy and f.idle()]
        fits = [f for f in idle if f.capacity >= nbytes]
        if fits:
            return min(fits, key=lambda f: f.capacity)
        kept = sum(f.capacity for f in self.files)
        for f in sorted(idle, key=lambda f: f.capacity):
            if kept + nbytes <= POOL_BYTES:
                break
            f.remove()
            self.files.remove(f)
            kept -= f.capacity
        file = _File(self.prefix, -(-nbytes // _GRAIN) * _GRAIN)
        self.files.append(file)
        return file

    def release(self) -> None:
        """Forget this run's arrays (the files stay for the next run)."""
        self.scope, self.written = None, {}

    def close(self) -> None:
        """Remove every file (their readers' mappings stay valid)."""
        for f in self.files:
            f.remove()
        self.files = []
        self.release()


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _process_vm_readv():
    """Linux's ``process_vm_readv`` (one copy from another process's memory, by the kernel), or
    None where the C library has none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                   ctypes.c_ulong]
    fn.restype = ctypes.c_ssize_t
    return fn


_READV = _process_vm_readv()


def memory_reads_possible() -> bool:
    """Whether this process could read a peer's memory (whether its peers may is up to the kernel:
    a probe asks each receiver)."""
    return _READV is not None


def read_memory(pid: int, address: int, into: np.ndarray) -> None:
    """Copy ``into.nbytes`` bytes at ``address`` of process ``pid`` into ``into`` (C-contiguous)."""
    n, done = into.nbytes, 0
    base = into.ctypes.data
    while done < n:
        local, remote = _IoVec(base + done, n - done), _IoVec(address + done, n - done)
        got = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) if _READV else -1
        if got <= 0:
            err = ctypes.get_errno()
            raise OSError(err, f"reading {n} bytes of process {pid}'s memory: {os.strerror(err) if err else 'unavailable'}")
        done += got


def probe_memory(pid: int, address: int, secret: bytes) -> bool:
    """Whether this process may read process ``pid``'s memory (the kernel's ptrace rules decide):
    the mesh's secret, read at ``address`` there."""
    got = np.empty(len(secret), dtype=np.uint8)
    try:
        read_memory(pid, address, got)
    except OSError:
        return False
    return got.tobytes() == secret


def _owner(array: np.ndarray) -> np.ndarray:
    """The array whose memory ``array`` views (itself if it owns its memory)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def shared_memory_prefix(secret: bytes) -> str | None:
    """The name prefix of one mesh's shared-memory files (derived from its secret, so the driver
    can find leftovers), or None where the node has no shared-memory directory."""
    if not os.path.isdir(SHM_DIR):
        return None
    return "simshard-" + hashlib.sha256(secret).hexdigest()[:16]


def map_shared(name: str, dtype, shape, slot: int) -> np.ndarray:
    """A read-only array over the body of the shared file ``name`` (``SharedBlocks``); reader
    ``slot`` is cleared when the last view of the mapping goes, so the sender may write it again."""
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if n == 0:
        _let_go(name, slot)
        return np.empty(shape, dtype=dtype)
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ,
                       offset=READERS)
    except BaseException:
        _let_go(name, slot)
        raise
    finally:
        os.close(fd)
    weakref.finalize(mm, _let_go, name, slot)  # by name: the file is opened again only when the view goes
    return np.frombuffer(mm, dtype=dtype).reshape(shape)


def _let_go(name: str, slot: int) -> None:
    """Clear a reader's slot of a shared file (its mapping is gone); nothing if the file is."""
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_WRONLY)
    except FileNotFoundError:  # the mesh closed (its files removed) before this view went
        return
    try:
        os.pwrite(fd, b"\0", slot)
    finally:
        os.close(fd)


def map_ring(name: str) -> np.ndarray:
    """A read-only view of a sender's ring (``Ring``), its pages mapped as they are read."""
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY)
    try:
        return np.frombuffer(mmap.mmap(fd, RING_BYTES, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ), dtype=np.uint8)
    finally:
        os.close(fd)


def remove_shared(prefix: str) -> int:
    """Unlink every file a mesh's runs left in shared memory (a process that died mid-run)."""
    if not os.path.isdir(SHM_DIR):
        return 0
    gone = 0
    for name in os.listdir(SHM_DIR):
        if name.startswith(prefix + "-"):
            gone += _unlink(name)
    return gone


def _unlink(name: str) -> bool:
    """Remove the name of a file of the node's shared memory (its mappings stay); False if it was gone."""
    try:
        os.unlink(os.path.join(SHM_DIR, name))
    except FileNotFoundError:
        return False
    return True
