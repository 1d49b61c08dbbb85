"""Frames authenticated one by one, on the sockets between nodes (TCP).

Within a node the abstract Unix socket is the kernel's: once a connection has answered the
listener's challenge (``admission``), nobody else can write into it. Between nodes anyone on the
path can read, inject or replay TCP segments, so there every frame (and every answer back) also
carries a MAC: HMAC-SHA256 over the frame's number on the connection and its bytes (prefix,
header, body), under a key the handshake derives from the mesh's secret and the listener's nonce
(``keys``): never the secret itself, a fresh pair of keys per connection (one per direction), so
a frame replayed from another connection, or from earlier on this one, fails its MAC as surely as
one with a byte changed. The receiver checks a frame's MAC before it hands anything of it on; a
frame that fails closes the connection, with an error naming the peer.

Bodies stay raw array bytes and headers msgpack (``frames``): nothing from a peer is unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

MAC_BYTES = hashlib.sha256().digest_size
_COUNT = struct.Struct("<Q")  # a frame's number on its connection, in the order written


def keys(secret: bytes, nonce: bytes) -> tuple[bytes, bytes]:
    """The connection's two frame keys (frames to the listener, answers to the connecting side),
    from the mesh's secret and the listener's challenge; distinct from the challenge's response,
    which crosses the socket."""
    return (hmac.new(secret, b"simshard frames to the listener\0" + nonce, hashlib.sha256).digest(),
            hmac.new(secret, b"simshard answers to the connecting side\0" + nonce, hashlib.sha256).digest())


class Signer:
    """One direction's MACs, frame after frame in the order they are written."""

    def __init__(self, key: bytes):
        self.base = hmac.new(key, digestmod=hashlib.sha256)
        self.count = 0

    def sign(self, parts) -> bytes:
        mac = self.base.copy()
        mac.update(_COUNT.pack(self.count))
        self.count += 1
        for part in parts:
            mac.update(part)
        return mac.digest()


class Verifier:
    """The other end of a ``Signer``: ``take`` numbers the next frame (in stream order), ``check``
    whether a MAC answers that frame's bytes (compared in constant time)."""

    def __init__(self, key: bytes):
        self.signer = Signer(key)

    def take(self) -> int:
        count = self.signer.count
        self.signer.count += 1
        return count

    def check(self, count: int, mac, parts) -> bool:
        expected = self.signer.base.copy()
        expected.update(_COUNT.pack(count))
        for part in parts:
            expected.update(part)
        return hmac.compare_digest(expected.digest(), bytes(mac))
