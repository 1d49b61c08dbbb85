"""The listeners of a device process (``runtime/wire/admission.py``: the data plane's ``Listener``
and the control line's ``ControlServer``), without Ray, against raw sockets: a connection must
answer a challenge (HMAC of a nonce with the mesh's secret; the secret itself never crosses the
socket) within ``HANDSHAKE_SECONDS`` or it is closed, a listener holds at most
``MAX_CONNECTIONS``, and running out of descriptors pauses its accept loop, never ends it."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import threading
import time

import numpy as np
import pytest

from simshard.runtime.wire import admission
from simshard.runtime.wire.admission import NONCE_BYTES, respond
from simshard.runtime.wire.control_line import ControlLine
from simshard.runtime.wire.control_server import ControlServer
from simshard.runtime.wire.sockets import Connection, Listener
from runtime_helpers import EVENT_LOOPS, new_loop, run_on

SECRET = b"s" * 16


class Served:
    """A listener (``Listener`` or ``ControlServer``) on its own event loop in a thread; what its
    connections delivered in ``got``."""

    def __init__(self, kind: str, loop: str = "asyncio"):
        self.loop = new_loop(loop)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.got: list = []
        if kind == "listener":
            self.server = Listener(SECRET, self.deliver)
        else:
            self.server = ControlServer(SECRET, {"run": self.run})
        self.address = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def deliver(self, *frame):
        self.got.append(frame)
        return "ok"

    async def run(self, *args):
        self.got.append(args)
        return b"ran"

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        time.sleep(0.05)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(params=["listener", "control"])
def kind(request):
    return request.param


@pytest.fixture(params=EVENT_LOOPS)
def served(kind, request):
    """A listener of ``kind`` on each event loop Ray may give a device process."""
    s = Served(kind, request.param)
    yield s
    s.stop()


def raw(address: str, timeout: float = 3.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(address)
    return sock


def read_all(sock: socket.socket, n: int) -> bytes:
    """Up to ``n`` bytes, fewer if the listener closes the connection first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_a_connection_that_does_not_answer_the_challenge_is_closed_within_the_handshake_time(served):
    sock = raw(served.address)
    start = time.monotonic()
    assert len(read_all(sock, NONCE_BYTES)) == NONCE_BYTES  # the challenge
    assert sock.recv(1) == b""  # closed by the listener (a socket timeout here: held for ever)
    assert time.monotonic() - start < admission.HANDSHAKE_SECONDS + 1.0
    sock.close()


def test_a_response_to_another_nonce_is_refused(served):
    sock = raw(served.address)
    read_all(sock, NONCE_BYTES)
    sock.sendall(respond(SECRET, b"n" * NONCE_BYTES))  # a replayed answer to another challenge
    assert sock.recv(1) == b""
    sock.close()
    assert served.got == []


def test_a_listener_holds_at_most_its_connection_limit(kind, monkeypatch):
    assert admission.MAX_CONNECTIONS >= 256  # far above a mesh's peers
    monkeypatch.setattr(admission, "MAX_CONNECTIONS", 4)
    served = Served(kind)
    held = [raw(served.address) for _ in range(4)]
    for sock in held:
        assert len(read_all(sock, NONCE_BYTES)) == NONCE_BYTES
    extra = raw(served.address)
    assert read_all(extra, NONCE_BYTES) == b""  # closed at once, unchallenged
    extra.close()
    held.pop().close()  # room again once one goes
    time.sleep(0.1)
    again = raw(served.address)
    assert len(read_all(again, NONCE_BYTES)) == NONCE_BYTES
    for sock in (*held, again):
        sock.close()
    served.stop()


def test_running_out_of_descriptors_pauses_accepting_and_logs_nothing(served, caplog):
    caplog.set_level(logging.ERROR)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(3.0)
    lowest_free = socket.socket()  # every descriptor below this one is in use
    limit = lowest_free.fileno()
    lowest_free.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        sock.connect(served.address)  # queued: the listener's accept fails with EMFILE
        time.sleep(0.3)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    start = time.monotonic()
    assert len(read_all(sock, NONCE_BYTES)) == NONCE_BYTES  # accepted once descriptors are free again
    assert time.monotonic() - start < 0.5
    sock.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class Eavesdropper:
    """A listener that only records what a connecting side writes after the challenge."""

    def __init__(self):
        self.address = "\0simshard-test-" + str(id(self))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen()
        self.nonce, self.heard = b"c" * NONCE_BYTES, b""
        self.thread = threading.Thread(target=self.listen, daemon=True)
        self.thread.start()

    def listen(self):
        conn, _ = self.sock.accept()
        conn.settimeout(1.0)
        conn.sendall(self.nonce)
        try:
            while True:
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                self.heard += chunk
        except OSError:
            pass
        conn.close()

    def close(self):
        self.thread.join(5)
        self.sock.close()


def test_the_secret_never_crosses_the_socket_only_the_hmac_of_the_challenge():
    want = respond(SECRET, b"c" * NONCE_BYTES)

    line_side = Eavesdropper()
    ControlLine(line_side.address, SECRET).close()
    line_side.close()
    assert line_side.heard == want

    async def connect(address):
        conn = Connection(address, SECRET)
        conn.send(0, 1, 2, (0,), np.ones(3), None, "")
        assert await asyncio.wait_for(conn.opened, 5)
        await asyncio.sleep(0.1)
        conn.close()

    peer_side = Eavesdropper()
    asyncio.run(connect(peer_side.address))
    peer_side.close()
    assert peer_side.heard.startswith(want) and SECRET not in peer_side.heard


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_a_peer_turned_away_by_a_full_listener_is_not_opened(monkeypatch, loop):
    monkeypatch.setattr(admission, "MAX_CONNECTIONS", 1)

    async def main():
        listener = Listener(SECRET, lambda *frame: "ok")
        await listener.start()
        first, second = Connection(listener.address, SECRET), Connection(listener.address, SECRET)
        opened = [await asyncio.wait_for(c.opened, 5) for c in (first, second)]
        await asyncio.wait_for(first.sync(), 5)  # the admitted one works
        for c in (first, second):
            c.close()
        listener.close()
        return opened, second.failed

    opened, failed = run_on(loop, main())
    assert opened == [True, False]  # the device host then reaches that peer by Ray calls
    assert isinstance(failed, ConnectionError)
