"""The receiving end of a socket between device processes: frames parsed off the stream, each
handed on in stream order.

A ``Receiver`` reads into a staging buffer (frame prefixes, headers, small bodies) and a large
body straight into the array it hands on (no staging copy); a body that did not cross the socket
is read from the sender's memory, copied out of its ring, or mapped from its shared file. It
answers only what the sender must hear of: a frame its device refused, a sync, a probe, a lent
body read.
"""

from __future__ import annotations

import asyncio
from typing import Callable, NamedTuple

import numpy as np

from . import memory_reads
from .admission import HANDSHAKE_SECONDS, RESPONSE_BYTES, new_nonce, verified
from .frames import (ANSWER, FRAME, IN_PLACE, PROBE, STAGE, Answer, ErrorAnswer, Header, Storage, Stored,
                     decode_header, encode_answer, widen)
from .memory_reads import Lent
from .shared_memory import map_ring, map_shared

# (run_id, src, dst, key, array, tag, note) -> the device's answer (an ``Answer`` or its text:
# "ok", or why not)
Deliver = Callable[..., "Answer | str"]
# (run_id, src, dst, key, dtype, shape) -> the array a frame's body goes into, or None (a new one)
Place = Callable[..., "np.ndarray | None"]


def nowhere(*frame) -> None:
    """A ``Place`` that offers none: every body gets a new array."""
    return None


class InPlace(NamedTuple):
    """A large body being received straight into its array: the frame's header, the array, its
    bytes, and how many have come."""

    header: Header
    array: np.ndarray
    flat: memoryview
    filled: int


class Receiver(asyncio.BufferedProtocol):
    """One incoming connection: frames parsed from a staging buffer, large bodies received in
    place (into the array ``place`` names, the receiver's own place for it, or a new one), each
    frame handed to ``deliver`` in stream order."""

    def __init__(self, secret: bytes, deliver: Deliver, place: Place = nowhere,
                 on_close: Callable[[], None] | None = None):
        self.secret, self.deliver, self.place = secret, deliver, place
        self.on_close = on_close  # told once the connection has closed (the listener's count of them)
        self.nonce = new_nonce()  # the challenge the sender must answer before any frame counts
        self.authed = False
        self.deadline: asyncio.TimerHandle | None = None  # closes a connection that does not answer in time
        self.stage = bytearray(STAGE)
        self.start = self.end = 0  # the unparsed bytes are stage[start:end]
        self.body: InPlace | None = None  # a body being read in place
        self.rings: dict[str, np.ndarray] = {}  # the sender's ring (shared_memory.Ring), mapped on its first use
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
            header, array, flat, filled = self.body
            body = InPlace(header, array, flat, filled + nbytes)
            if body.filled < len(body.flat):
                self.body = body
                return
            self.body = None
            self._hand_on(body.header, body.array)
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
        """Hand on every whole frame in the stage (after the answer to the challenge, first)."""
        if not self.authed and not self._authenticate():
            return
        while self.end - self.start >= FRAME.size:
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
        return True

    def _control(self, seq: int, bn: int) -> bool:
        """A frame with no header, answered at once: a sync (no body: every frame before it has
        been handed on) or a probe (``Connection``: may this process read the sender's memory?).
        False while the probe's body has not all come."""
        if bn == 0:
            self.start += FRAME.size
            self._answer(seq, Answer.SYNC)
            return True
        if self.end - self.start < FRAME.size + bn:
            return False
        pid, address = PROBE.unpack_from(self.stage, self.start + FRAME.size)
        self.start += FRAME.size + bn
        self._answer(seq, Answer.CMA if memory_reads.probe_memory(pid, address, self.secret) else Answer.NO_CMA)
        return True

    def _message(self, seq: int, hn: int, bn: int) -> bool:
        """A message's frame: handed on when its header (and a small body) have come, or its large
        body set to be received in place. False while it waits for more of the stream."""
        head_end = self.start + FRAME.size + hn
        if self.end < head_end:
            if head_end - self.start > len(self.stage):
                self._compact(head_end - self.start)
            return False
        have = self.end - head_end
        if bn > have and bn < IN_PLACE:
            if head_end - self.start + bn > len(self.stage) - self.start:
                self._compact(head_end - self.start + bn)
            return False  # a small body not complete yet: wait for it in the stage
        header = decode_header(self.stage[self.start + FRAME.size:head_end])
        dtype, shape, stored = header.dtype, header.shape, header.stored
        # a small body is copied out of the stage wherever it goes: not worth finding its place
        array = (self.place(header.run_id, header.src, header.dst, header.key, dtype, shape)
                 if bn >= IN_PLACE or stored else None)
        if stored is not None:  # the body is in shared memory or the sender's (no bytes follow)
            self.start = head_end
            self._hand_on(header, self._from_stored(seq, stored, dtype, shape, array))
            return True
        return self._body(header, array, head_end, bn, have)

    def _body(self, header: Header, array: np.ndarray | None, head_end: int, bn: int, have: int) -> bool:
        """Copy what came of a frame's body (``have`` of its ``bn`` bytes, after ``head_end``) into
        its array and hand it on; a large body not all here is received in place (False)."""
        if array is None:
            array = np.empty(header.shape, dtype=header.dtype)
        if array.nbytes != bn:
            raise ValueError(f"a frame's body has {bn} bytes for a {header.dtype}{list(header.shape)} array")
        flat = memoryview(array.reshape(-1).view(np.uint8)) if bn else memoryview(b"")
        got = min(bn, have)
        if got:
            flat[:got] = self.stage[head_end:head_end + got]
        self.start = head_end + got
        if got < bn:  # a large body: the rest goes straight into the array
            self.body = InPlace(header, array, flat, got)
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
            answer = Answer(self.deliver(header.run_id, header.src, header.dst, header.key, array, header.tag,
                                         header.note))
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
        self.transport.write(ANSWER.pack(seq, len(data)) + data)

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
            self.transport.write(b"".join(ANSWER.pack(seq, len(read)) + read for seq in reads))
