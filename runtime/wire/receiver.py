"""The receiving end of a socket between device processes: frames parsed off the stream, each
handed on in stream order.

A ``Receiver`` reads into a staging buffer (frame prefixes, headers, small bodies) and a large
body straight into the array it hands on (no staging copy); a body that did not cross the socket
is read from the sender's memory, copied out of its ring, or mapped from its shared file. It
answers only what the sender must hear of: a frame its device refused, a sync, a probe, a lent
body read. On a socket between nodes (``authenticate_frames``) every frame carries a MAC
(``frame_auth``), checked before anything of the frame is handed on; a frame that fails it, or
that names shared memory or this node's processes, closes the connection with an error naming the
peer (``refusal``, logged).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Callable, NamedTuple

import numpy as np

from . import memory_reads
from . import frame_auth
from .admission import HANDSHAKE_SECONDS, RESPONSE_BYTES, new_nonce, verified
from .frame_auth import MAC_BYTES, Signer, Verifier
from .frame_rings import RingReaders, reader_of
from .frames import (ANSWER, DOORBELL, FRAME, IN_PLACE, PROBE, STAGE, Answer, ErrorAnswer, Header, Storage, Stored,
                     decode_header, encode_answer, widen)
from .memory_reads import Lent
from .shared_memory import map_ring, map_shared, shared_memory_prefix

# (run_id, src, dst, key, array, tag, note) -> the device's answer (an ``Answer`` or its text:
# "ok", or why not)
Deliver = Callable[..., "Answer | str"]
# (run_id, src, dst, key, dtype, shape) -> the array a frame's body goes into, or None (a new one)
Place = Callable[..., "np.ndarray | None"]
LOG = logging.getLogger("simshard.wire")


def nowhere(*frame) -> None:
    """A ``Place`` that offers none: every body gets a new array."""
    return None


class Check(NamedTuple):
    """A frame's MAC, to check once its body has all come: the frame's number on the connection,
    the MAC it came with, and its bytes before the body (prefix and header)."""

    count: int
    mac: bytes
    head: bytes


class InPlace(NamedTuple):
    """A large body being received straight into its array: the frame's header, the array, its
    bytes, how many have come, and the MAC to check once all have (between nodes)."""

    header: Header
    array: np.ndarray
    flat: memoryview
    filled: int
    check: Check | None = None


class Receiver(asyncio.BufferedProtocol):
    """One incoming connection: frames parsed from a staging buffer, large bodies received in
    place (into the array ``place`` names, the receiver's own place for it, or a new one), each
    frame handed to ``deliver`` in stream order."""

    def __init__(self, secret: bytes, deliver: Deliver, place: Place = nowhere,
                 on_close: Callable[[], None] | None = None, authenticate_frames: bool = False,
                 rings: RingReaders | None = None):
        self.secret, self.deliver, self.place = secret, deliver, place
        # where the sender's ring of frames is read, if it names one (``frame_rings``): None, no rings
        self.ring_readers, self.frame_ring = rings, None
        # between nodes: every frame's MAC checked, every answer's made (set up by the handshake)
        self.macs = authenticate_frames
        self.verifier: Verifier | None = None
        self.signer: Signer | None = None
        self.pre = FRAME.size + (MAC_BYTES if authenticate_frames else 0)  # a frame's bytes before its header
        self.refusal: str | None = None  # why the connection was closed, when a frame was refused
        self.on_close = on_close  # told once the connection has closed (the listener's count of them)
        self.nonce = new_nonce()  # the challenge the sender must answer before any frame counts
        self.authed = False
        self.deadline: asyncio.TimerHandle | None = None  # closes a connection that does not answer in time
        self.stage = bytearray(STAGE)
        self.start = self.end = 0  # the unparsed bytes are stage[start:end]
        self.body: InPlace | None = None  # a body being read in place
        self.rings: dict[str, np.ndarray] = {}  # the sender's ring (shared_memory.Ring), mapped on its first use
        self.dtypes: dict[str, np.dtype] = {}  # each dtype a frame has named, checked once (``dtype_of``)
        self.reads: list[int] = []  # frames whose lent bodies were read this turn (``_read``)
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        widen(transport)
        transport.write(self.nonce)
        self.deadline = asyncio.get_running_loop().call_later(HANDSHAKE_SECONDS, transport.close)

    def connection_lost(self, exc) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        if self.frame_ring is not None:
            self.ring_readers.discard(self.frame_ring)
            self.frame_ring.close()
        if self.on_close is not None:
            self.on_close()
            self.on_close = None

    def get_buffer(self, sizehint: int):
        if self.body is not None:
            return self.body.flat[self.body.filled:]
        if self.end == len(self.stage):
            self._compact(self.end - self.start + STAGE // 4)
        return memoryview(self.stage)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.body is not None:
            body = self.body._replace(filled=self.body.filled + nbytes)
            if body.filled < len(body.flat):
                self.body = body
                return
            self.body = None
            check = body.check
            if check is not None and not self.verifier.check(check.count, check.mac, (check.head, body.flat)):
                self._refuse(f"frame {check.count} failed its MAC (changed, replayed or forged)")
                return
            self._hand_on(body.header, body.array)
            return
        self.end += nbytes
        try:
            self._parse()
        except Exception as e:  # a malformed stream: drop the connection rather than guess
            self._refuse(f"a malformed frame ({type(e).__name__}: {e})")

    def peer(self) -> str:
        """Who is on the other end, for an error: its address (TCP), or "a process of this node"."""
        name = self.transport.get_extra_info("peername") if self.transport is not None else None
        return f"the peer at {name[0]}:{name[1]}" if isinstance(name, tuple) else "a peer process of this node"

    def _refuse(self, why: str) -> None:
        """Close the connection for a frame it must not take, saying why and naming the peer (the
        sender's connection then fails: its device's run reports the lost messages)."""
        if self.refusal is None:
            self.refusal = f"refused a frame from {self.peer()}: {why}; the connection is closed, nothing of it handed on"
            LOG.error("simshard wire: %s", self.refusal)
        self.body = None
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
        """Hand on every whole frame in the stage (after the answer to the challenge, first)."""
        if not self.authed and not self._authenticate():
            return
        while self.end - self.start >= self.pre and not self.transport.is_closing():
            seq, hn, bn = FRAME.unpack_from(self.stage, self.start)
            whole = self._control(seq, bn) if hn == 0 else self._message(seq, hn, bn)
            if not whole:
                return
        if self.start == self.end:
            self.start = self.end = 0

    def _authenticate(self) -> bool:
        """Whether the stream starts with the answer to this connection's challenge (HMAC of the
        nonce with the mesh's secret: ``admission``); False too while it has not all come. A
        wrong one closes the connection."""
        if self.end - self.start < RESPONSE_BYTES:
            return False
        if not verified(self.secret, self.nonce, self.stage[self.start:self.start + RESPONSE_BYTES]):
            self.transport.close()
            return False
        self.authed = True
        self.deadline.cancel()
        self.start += RESPONSE_BYTES
        if self.macs:  # this connection's own keys: never the secret itself
            to_listener, to_sender = frame_auth.keys(self.secret, self.nonce)
            self.verifier, self.signer = Verifier(to_listener), Signer(to_sender)
        return True

    def _verified(self, head_end: int, body_end: int) -> bool:
        """Whether the staged frame at ``start`` (its header up to ``head_end``, its body up to
        ``body_end``) answers its MAC; True without MACs. A frame that does not is refused."""
        if self.verifier is None:
            return True
        at, count = self.start, self.verifier.take()
        stage = memoryview(self.stage)
        mac = stage[at + FRAME.size:at + self.pre]
        if self.verifier.check(count, mac, (stage[at:at + FRAME.size], stage[at + self.pre:body_end])):
            return True
        self._refuse(f"frame {count} failed its MAC (changed, replayed or forged)")
        return False

    def _control(self, seq: int, bn: int) -> bool:
        """A frame with no header, answered at once: a sync (no body: every frame before it has
        been handed on) or a probe (``Connection``: may this process read the sender's memory?).
        False while the probe's body has not all come."""
        if bn == 0:
            if not self._verified(self.start + self.pre, self.start + self.pre):
                return False
            self.start += self.pre
            if self.frame_ring is not None:  # the frames sent by ring before the sync are handed on first
                self.frame_ring.drain()
            self._answer(seq, Answer.SYNC)
            return True
        if self.macs:  # between nodes nobody reads another node's memory
            self._refuse("a memory probe or a ring of frames, on a socket between nodes")
            return False
        if self.end - self.start < FRAME.size + bn:
            return False
        body = FRAME.size + self.start
        self.start += FRAME.size + bn
        if bn == PROBE.size:
            pid, address = PROBE.unpack_from(self.stage, body)
            self._answer(seq, Answer.CMA if memory_reads.probe_memory(pid, address, self.secret) else Answer.NO_CMA)
        elif bn == DOORBELL:
            if self.frame_ring is not None:
                self.frame_ring.drain()
        else:
            self._answer(seq, self._read_ring(bytes(self.stage[body:body + bn])))
        return True

    def _read_ring(self, name: bytes) -> Answer:
        """Read the sender's ring of frames ``name`` on every turn of this process's polling loop
        (``frame_rings``), its bytes handed to a ``Receiver`` of their own that answers on this
        socket; whether it could be mapped."""
        if self.ring_readers is None or self.frame_ring is not None:
            return Answer.NO_RING
        stream = Receiver(self.secret, self.deliver, self.place)
        stream.authed, stream.transport = True, self.transport
        self.frame_ring = reader_of(name.decode(errors="replace"), shared_memory_prefix(self.secret) or "", stream,
                                    "a peer process's frames")
        if self.frame_ring is None:
            return Answer.NO_RING
        self.ring_readers.add(self.frame_ring)
        return Answer.RING

    def _message(self, seq: int, hn: int, bn: int) -> bool:
        """A message's frame: handed on when its header (and a small body) have come, or its large
        body set to be received in place. False while it waits for more of the stream."""
        head_end = self.start + self.pre + hn
        if self.end < head_end:
            if head_end - self.start > len(self.stage):
                self._compact(head_end - self.start)
            return False
        have = self.end - head_end
        if bn > have and bn < IN_PLACE:
            if head_end - self.start + bn > len(self.stage) - self.start:
                self._compact(head_end - self.start + bn)
            return False  # a small body not complete yet: wait for it in the stage
        if bn <= have and not self._verified(head_end, head_end + bn):  # the whole frame is here: check it first
            return False
        header = decode_header(self.stage[self.start + self.pre:head_end])
        dtype, shape, stored = self.dtype_of(header.dtype), header.shape, header.stored
        if stored is not None and self.macs:
            self._refuse("a frame naming shared memory or a process's memory, on a socket between nodes")
            return False
        # a small body is copied out of the stage wherever it goes: not worth finding its place; and
        # between nodes a body goes into no place of the device's until its MAC has been checked
        array = (self.place(header.run_id, header.src, header.dst, header.key, dtype, shape)
                 if (bn >= IN_PLACE or stored) and not self.macs else None)
        if stored is not None:  # the body is in shared memory or the sender's (no bytes follow)
            self.start = head_end
            self._hand_on(header, self._from_stored(seq, stored, dtype, shape, array))
            return True
        return self._body(header, dtype, array, head_end, bn, have)

    def dtype_of(self, name: str) -> np.dtype:
        """The dtype a frame names (``dtype.str``), refused where it holds Python objects: raw bytes
        never are. Remembered: a connection's frames name a few dtypes, over and over."""
        dtype = self.dtypes.get(name)
        if dtype is None:
            dtype = np.dtype(name)
            if dtype.hasobject:
                raise ValueError(f"a frame's body is of dtype {name!r}, which holds Python objects")
            self.dtypes[name] = dtype
        return dtype

    def _body(self, header: Header, dtype: np.dtype, array: np.ndarray | None, head_end: int, bn: int,
              have: int) -> bool:
        """Copy what came of a frame's body (``have`` of its ``bn`` bytes, after ``head_end``) into
        its array (``dtype``: the header's, checked by ``dtype_of``) and hand it on; a large body not
        all here is received in place (False)."""
        at = self.start  # the frame's first byte
        if array is None and bn <= have:  # a small body, all here: copied out of the stage at once
            size = math.prod(header.shape)
            if size * dtype.itemsize != bn:
                raise ValueError(f"a frame's body has {bn} bytes for a {header.dtype}{list(header.shape)} array")
            array = np.frombuffer(self.stage, dtype, size, head_end).reshape(header.shape).copy()
            self.start = head_end + bn
            self._hand_on(header, array)
            return True
        if array is None:
            array = np.empty(header.shape, dtype=dtype)
        if array.nbytes != bn:
            raise ValueError(f"a frame's body has {bn} bytes for a {header.dtype}{list(header.shape)} array")
        flat = array.data.cast("B") if bn else memoryview(b"")  # (C-contiguous: new, or a place offered)
        got = min(bn, have)
        if got:
            flat[:got] = self.stage[head_end:head_end + got]
        self.start = head_end + got
        if got < bn:  # a large body: the rest goes straight into the array
            check = None
            if self.verifier is not None:  # its MAC checked once the body has all come
                check = Check(self.verifier.take(), bytes(self.stage[at + FRAME.size:at + self.pre]),
                              bytes(self.stage[at:at + FRAME.size]) + bytes(self.stage[at + self.pre:head_end]))
            self.body = InPlace(header, array, flat, got, check)
            self.start = self.end = 0
            return False
        self._hand_on(header, array)
        return True

    def _from_stored(self, seq: int, stored: Stored, dtype, shape, array: np.ndarray | None) -> np.ndarray | Lent:
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
            ring = self.rings.get(name)
            if ring is None:
                ring = self.rings[name] = map_ring(name)
            if array is None:
                array = np.empty(shape, dtype=dtype)
            flat = array.reshape(-1).view(np.uint8)
            flat[...] = ring[at:at + flat.size]
            return array
        mapped = map_shared(name, dtype, shape, slot=at)
        if array is None:
            return mapped
        np.copyto(array, mapped)
        return array

    def _hand_on(self, header: Header, array: np.ndarray | Lent) -> None:
        """Give a frame's message to its device; answer the sender only if it did not take it."""
        try:
            said = self.deliver(header.run_id, header.src, header.dst, header.key, array, header.tag, header.note)
            if said == Answer.OK:  # (compared as text: making the enum member takes a third of a microsecond)
                return
            answer = Answer(said)
        except Exception as e:  # the receiving device could not take it: the sender hears why
            answer = ErrorAnswer(f"{type(e).__name__}: {e}")
        if answer is not Answer.OK:
            if isinstance(array, Lent):  # not taken: it will not be read
                array.release()
            self._answer(header.seq, answer)

    def _answer(self, seq: int, answer: Answer | ErrorAnswer) -> None:
        if self.transport.is_closing():
            return  # the sender is gone: nobody to tell
        data = encode_answer(answer)
        self.transport.write(self._signed(ANSWER.pack(seq, len(data)) + data))

    def _signed(self, answer: bytes) -> bytes:
        """An answer, with its MAC after it between nodes."""
        return answer if self.signer is None else answer + self.signer.sign((answer,))

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
            self.transport.write(b"".join(self._signed(ANSWER.pack(seq, len(read)) + read) for seq in reads))
