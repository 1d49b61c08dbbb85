"""The frame protocol between device processes: what a frame and an answer are on the socket.

A message is one frame: ``FRAME`` (a sequence number, the header's bytes, the body's bytes), the
``Header`` in msgpack (run, source, destination, key, tag, note, dtype, shape, and where the body
is when it does not follow: ``Stored``: plain data, never a pickle, so a frame can carry no code)
and the array's raw bytes. A frame with no header is a sync (no
body), a probe (``PROBE``: may the receiver read the sender's memory?), a doorbell (a body of
``DOORBELL`` bytes: read the sender's ring of frames now) or the name of that ring (any other
body: ``frame_rings``). The receiver writes
back ``ANSWER`` (a sequence number, the answer's bytes) and the answer's text (``Answer``).
"""

from __future__ import annotations

import socket
import struct
from enum import Enum
from typing import Hashable, NamedTuple

import msgpack
import numpy as np

FRAME = struct.Struct("<QII")  # sequence number, header bytes (0: a sync or probe frame), body bytes
ANSWER = struct.Struct("<QI")  # sequence number, answer bytes
PROBE = struct.Struct("<QQ")  # a probe frame's body: the sender's pid, the address of its copy of the secret
DOORBELL = 1  # a doorbell frame's body bytes (their value unread)
STAGE = 1 << 18  # the receive buffer for frame prefixes, headers and small bodies
IN_PLACE = 1 << 16  # a body from this size up is read straight into its array
SMALL = 1 << 16  # a body below this size is sent in one write with its header
SOCKET_BUFFER = 4 << 20  # the socket buffers asked for (see ``widen``)


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
    RING = "ring"  # the sender's ring of frames is mapped: small frames may go by it (``frame_rings``)
    NO_RING = "no ring"  # ... or could not be
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
    RING = "ring"  # in the sender's ring (``shared_memory.Ring``): the ring's file, at the offset
    FILE = "file"  # in a shared file (``shared_memory.SharedBlocks``): the file, ``at`` the reader's slot


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


def header_packer() -> msgpack.Packer:
    """A packer for ``encode_header``: one kept by a sender packs each header in about half the
    time ``msgpack.packb`` takes to make its own (0.34 against 0.61 us here). Not for two threads."""
    return msgpack.Packer(default=_plain, use_bin_type=True)


# a header's first bytes: a msgpack array of ``Header``'s ten fields, then its sequence number and
# run as msgpack uint 64 (a valid encoding of any size: the reader takes it as the number it is)
_HEADER_START = struct.Struct(">BBQBQ")
_ARRAY_OF_10, _UINT_64 = 0x9A, 0xCF


class HeaderEncoder:
    """``encode_header`` for one sender, remembering what repeats: a program sends the same
    message (source, destination, key, tag, note, dtype, shape) on every run, under a new
    sequence number and run, so the rest of its header is packed once and only those two numbers
    are written per frame (0.4 against 1.2 us a frame here: a message in flight waits for its
    header). A body named in shared memory (``stored``) changes from frame to frame: packed whole.
    The bytes are ``encode_header``'s to the byte but for the two numbers' width, which msgpack
    readers take alike. Holds at most ``KEEP`` headers (then starts again). Not for two threads."""

    KEEP = 4096

    def __init__(self):
        self.packer = header_packer()
        self.rest: dict[tuple, bytes] = {}

    def encode(self, seq: int, run_id: int, src: int, dst: int, key, tag, note: str, dtype: str, shape: tuple,
               stored: "Stored | None" = None) -> bytes:
        if stored is not None:
            return encode_header(Header(seq, run_id, src, dst, key, tag, note, dtype, shape, stored), self.packer)
        fields = (src, dst, key, tag, note, dtype, shape)
        rest = self.rest.get(fields)
        if rest is None:
            if len(self.rest) >= self.KEEP:
                self.rest.clear()
            rest = self.rest[fields] = self.packer.pack((*fields, None))[1:]  # (less its array's first byte)
        return _HEADER_START.pack(_ARRAY_OF_10, _UINT_64, seq, _UINT_64, run_id) + rest


def encode_header(header: Header, packer: msgpack.Packer | None = None) -> bytes:
    """The header as msgpack: plain data (numbers, text, tuples of them), which a receiver reads
    without running anything the sender chose (a pickle could name any callable)."""
    stored = None if header.stored is None else header.stored.to_wire()
    return (packer or header_packer()).pack((*header[:-1], stored))


def decode_header(data) -> Header:
    """The header ``encode_header`` wrote (its sequences read back as tuples, as they were sent)."""
    *head, stored = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=True)
    return Header(*head, None if stored is None else Stored.from_wire(stored))


def _plain(value):
    """A numpy scalar in a key or tag as the Python number it equals (msgpack packs no numpy types)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a frame header holds plain data only, not {type(value).__name__}")


def widen(transport) -> None:
    """Ask for socket buffers of a few MiB (the kernel caps them at net.core.wmem_max): a large
    frame then crosses in a few system calls instead of one per default-sized buffer."""
    sock = transport.get_extra_info("socket")
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:
            pass
