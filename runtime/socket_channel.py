"""Moved to ``simshard.runtime.wire`` (``frames``, ``receiver``, ``sockets``, ``memory_reads``,
``shared_memory``): this module re-exports their public names for old imports. Monkeypatching a
constant here changes nothing: patch it in the module that uses it (``wire.shared_memory``)."""

from .wire.frames import Answer, ErrorAnswer, Header, Storage, Stored, decode_answer, decode_header, encode_answer, encode_header
from .wire.memory_reads import Lent, array_owner, memory_reads_possible, probe_memory, read_memory
from .wire.receiver import Deliver, Place, Receiver
from .wire.shared_memory import (POOL_BYTES, READERS, RING_BYTES, RING_MIN, SHM_BYTES, SHM_DIR, Ring, SharedBlocks,
                                 map_ring, map_shared, remove_shared, shared_memory_prefix)
from .wire.sockets import Connection, Listener

__all__ = [
    "Answer", "ErrorAnswer", "Header", "Storage", "Stored", "decode_answer", "decode_header", "encode_answer",
    "encode_header", "Lent", "array_owner", "memory_reads_possible", "probe_memory", "read_memory", "Deliver", "Place",
    "Receiver", "POOL_BYTES", "READERS", "RING_BYTES", "RING_MIN", "SHM_BYTES", "SHM_DIR", "Ring", "SharedBlocks",
    "map_ring", "map_shared", "remove_shared", "shared_memory_prefix", "Connection", "Listener",
]
