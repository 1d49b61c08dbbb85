"""Who may connect to a listener of a device process, and how many at once.

An abstract Unix socket has no permissions: any local process of any user can connect to it (and
a TCP port to anyone who reaches the node). So a listener (``sockets.Listener``,
``control_server.ControlServer``) admits a connection only once it has proved it knows the mesh's
secret, without the secret ever crossing the socket: the listener sends a random nonce, the
connecting side answers HMAC-SHA256(secret, nonce) (``respond``), the listener checks it in
constant time (``verified``). One round trip, at connect time only.

A connection that has not answered within ``HANDSHAKE_SECONDS`` is closed, and a listener holds
at most ``MAX_CONNECTIONS`` at once (``Admissions``): idle connections cannot pile up until the
process runs out of descriptors. Should it run out all the same (or the kernel report a connection
aborted before it was accepted), the accept loop waits ``ACCEPT_BACKOFF_SECONDS`` and goes on
accepting (``accept_forever``) instead of ending.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import socket
from typing import Callable

NONCE_BYTES = 16  # the listener's challenge
RESPONSE_BYTES = hashlib.sha256().digest_size  # the connecting side's answer: HMAC-SHA256(secret, nonce)
HANDSHAKE_SECONDS = 1.0  # how long a new connection has to answer the challenge
MAX_CONNECTIONS = 256  # per listener: far above a mesh's peers (one connection per peer process)
ACCEPT_BACKOFF_SECONDS = 0.05  # the pause after a failed accept (out of descriptors, say)
BACKLOG = 128  # connections the kernel queues before they are accepted


def new_nonce() -> bytes:
    """A fresh challenge: a response to one never answers another."""
    return os.urandom(NONCE_BYTES)


def respond(secret: bytes, nonce: bytes) -> bytes:
    """The connecting side's answer to ``nonce``: proves it knows ``secret`` without sending it."""
    return hmac.new(secret, nonce, hashlib.sha256).digest()


def verified(secret: bytes, nonce: bytes, response) -> bool:
    """Whether ``response`` answers ``nonce`` with ``secret`` (compared in constant time: the time
    taken tells nothing of how much of it was right)."""
    return hmac.compare_digest(bytes(response), respond(secret, nonce))


class Admissions:
    """How many connections a listener holds (authenticated or not): ``admit`` one if there is
    room (``limit``, ``MAX_CONNECTIONS`` unless told), ``leave`` when it closes."""

    def __init__(self, limit: int | None = None):
        self.limit = MAX_CONNECTIONS if limit is None else limit
        self.held = 0

    def admit(self) -> bool:
        if self.held >= self.limit:
            return False
        self.held += 1
        return True

    def leave(self) -> None:
        self.held = max(0, self.held - 1)


def listening_socket(family: int, address) -> socket.socket:
    """A non-blocking socket listening at ``address`` (a TCP one may be reused at once)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family != socket.AF_UNIX:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def accept_forever(sock: socket.socket, admissions: Admissions, serve: Callable[[socket.socket], None]) -> None:
    """Accept connections on ``sock`` until it is closed, handing each admitted one to ``serve``
    (non-blocking) and closing at once those beyond the limit. A failed accept (EMFILE, ENFILE,
    ECONNABORTED, ...) is waited out (``ACCEPT_BACKOFF_SECONDS``), not logged: the pending
    connection is tried again, and the loop goes on."""
    loop = asyncio.get_running_loop()
    while sock.fileno() >= 0:
        try:
            conn, _ = await loop.sock_accept(sock)
        except OSError:
            if sock.fileno() < 0:
                return  # the listener closed
            await asyncio.sleep(ACCEPT_BACKOFF_SECONDS)
            continue
        if not admissions.admit():
            conn.close()
            continue
        conn.setblocking(False)
        serve(conn)
