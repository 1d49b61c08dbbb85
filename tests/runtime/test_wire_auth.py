"""Frames between nodes (TCP) are authenticated one by one (``runtime/wire/frame_auth.py``): a MAC
per frame under keys the handshake derives from the mesh's secret and the listener's nonce (never
the secret itself). A frame with one byte changed in its header or body, a replayed frame, a frame
with a wrong MAC or none, is refused: the connection closes with an error naming the peer, nothing
of that frame (or after it) is handed on, and nothing is unpickled. Against the listener's TCP
address on loopback, with a raw client speaking the protocol."""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import threading
import time

import cloudpickle
import numpy as np
import pytest

from simshard.runtime.wire import frame_auth
from simshard.runtime.wire.admission import NONCE_BYTES, respond
from simshard.runtime.wire.frame_auth import MAC_BYTES, Signer
from simshard.runtime.wire.frames import ANSWER, FRAME, Header, encode_header
from simshard.runtime.wire.sockets import Connection, Listener
from runtime_helpers import EVENT_LOOPS, new_loop

SECRET = b"k" * 16


class TcpListener:
    """A ``Listener`` with a TCP address on loopback, on its own event loop in a thread."""

    def __init__(self, loop: str):
        self.loop = new_loop(loop)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.got: list = []
        self.listener = Listener(SECRET, self.deliver, tcp_host="127.0.0.1")
        asyncio.run_coroutine_threadsafe(self.listener.start(), self.loop).result(10)
        host, port = self.listener.tcp_address[4:].rsplit(":", 1)
        self.address = (host, int(port))

    def deliver(self, run_id, src, dst, key, array, tag, note):
        self.got.append((key, np.array(array)))
        return "ok"

    def stop(self):
        self.loop.call_soon_threadsafe(self.listener.close)
        time.sleep(0.05)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(params=EVENT_LOOPS)
def tcp(request):
    s = TcpListener(request.param)
    yield s
    s.stop()


@pytest.fixture
def unpickled(monkeypatch):
    """Every call of pickle's or cloudpickle's loads while the test runs (there must be none)."""
    calls = []

    def loads(*args, **kwargs):
        calls.append(args)
        raise AssertionError("a peer's bytes were unpickled")

    for module in (pickle, cloudpickle):
        monkeypatch.setattr(module, "loads", loads)
    return calls


def frame(seq: int, key, array: np.ndarray) -> tuple[bytes, bytes]:
    """A message frame's prefix-with-header and body, as ``Connection.send`` writes them."""
    header = encode_header(Header(seq, 0, 1, 2, key, None, "", array.dtype.str, array.shape, None))
    return FRAME.pack(seq, len(header), array.nbytes) + header, array.tobytes()


class RawPeer:
    """A client that speaks the protocol by hand: answers the challenge, then writes frames signed
    (or not) with the frame key the handshake derives, as it chooses."""

    def __init__(self, address):
        self.sock = socket.create_connection(address, timeout=5)
        nonce = self.read(NONCE_BYTES)
        self.sock.sendall(respond(SECRET, nonce))
        self.key = frame_auth.keys(SECRET, nonce)[0]
        self.signer = Signer(self.key)

    def read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                break
            data += chunk
        return data

    def signed(self, head: bytes, body: bytes = b"", signer: Signer | None = None) -> bytes:
        mac = (signer or self.signer).sign((head, body))
        return head[:FRAME.size] + mac + head[FRAME.size:] + body

    def sync(self, seq: int) -> bytes:
        """Write a sync frame and read its answer (b"" if the listener closed the connection)."""
        self.sock.sendall(self.signed(FRAME.pack(seq, 0, 0)))
        return self.read(ANSWER.size)

    def closed(self) -> bool:
        """Whether the listener has closed the connection (all it sent read, then the end)."""
        self.sock.settimeout(5)
        try:
            while self.sock.recv(4096):
                pass
        except ConnectionResetError:
            pass
        return True


def tampered(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1:]


SMALL = np.arange(6, dtype=np.float32)
LARGE = np.arange(1 << 16, dtype=np.float64)  # 512 KiB: received in place, its MAC checked at its end


def wrong_frames(peer: RawPeer):
    """name -> the bytes of a frame that must be refused, after a good frame 0 (peer's signer at 1)."""
    head, body = frame(1, (1,), SMALL)
    good = peer.signed(head, body)  # frame number 1: the one each of these stands in for
    peer.signer.count -= 1  # (not sent: the next stands in its place)
    lhead, lbody = frame(1, (1,), LARGE)
    large = peer.signed(lhead, lbody)
    peer.signer.count -= 1
    return {
        "a byte of the header changed": tampered(good, FRAME.size + MAC_BYTES + 3),
        "a byte of the body changed": tampered(good, len(good) - 2),
        "a byte of a large body changed": tampered(large, len(large) - 5),
        "a byte of the prefix changed": tampered(good, 1),
        "a wrong MAC": good[:FRAME.size] + bytes(MAC_BYTES) + good[FRAME.size + MAC_BYTES:],
        "no MAC": head + body,
        "signed with the secret itself": peer.signed(head, body, Signer(SECRET)),
    }


CASES = ["a byte of the header changed", "a byte of the body changed", "a byte of a large body changed",
         "a byte of the prefix changed", "a wrong MAC", "no MAC", "signed with the secret itself", "replayed"]


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_replayed_or_forged_frame_is_refused_naming_the_peer(tcp, unpickled, caplog, case):
    peer = RawPeer(tcp.address)
    head, body = frame(0, (0,), SMALL)
    first = peer.signed(head, body)
    peer.sock.sendall(first)
    assert peer.sync(1)  # answered: frame 0 was taken
    bad = first if case == "replayed" else wrong_frames(peer)[case]
    with caplog.at_level(logging.ERROR, logger="simshard.wire"):
        peer.sock.sendall(bad)
        head2, body2 = frame(3, (3,), SMALL)  # a good frame after it: never handed on either
        try:
            peer.sock.sendall(peer.signed(head2, body2))
        except OSError:
            pass
        assert peer.closed()
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [k for k, _ in tcp.got] == [(0,)]  # only the good frame before it
    assert tcp.got[0][1].tobytes() == SMALL.tobytes()
    message = caplog.records[0].getMessage()
    assert f"refused a frame from the peer at 127.0.0.1:{peer.sock.getsockname()[1]}" in message, message
    assert "nothing of it handed on" in message
    if case not in ("no MAC",):
        assert "failed its MAC" in message, message
    assert unpickled == []


def test_frames_signed_with_the_derived_key_are_taken_in_order(tcp, unpickled):
    peer = RawPeer(tcp.address)
    for k, array in enumerate([SMALL, LARGE, SMALL * 2]):
        head, body = frame(k, (k,), array)
        peer.sock.sendall(peer.signed(head, body))
    assert peer.sync(3)
    assert [k for k, _ in tcp.got] == [(0,), (1,), (2,)]
    assert tcp.got[1][1].tobytes() == LARGE.tobytes()
    assert unpickled == []


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_a_connection_between_nodes_refuses_an_answer_with_a_wrong_mac(loop):
    """The sender checks the receiver's answers too: a forged one fails the connection, naming the peer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def fake_listener():
        conn, _ = server.accept()
        conn.sendall(b"n" * NONCE_BYTES)
        conn.recv(1 << 16)  # the response and the sync frame
        answer = ANSWER.pack(0, 4) + b"sync"
        conn.sendall(answer + bytes(MAC_BYTES))  # a wrong MAC
        time.sleep(0.5)
        conn.close()

    thread = threading.Thread(target=fake_listener, daemon=True)
    thread.start()

    async def main():
        conn = Connection(f"tcp:127.0.0.1:{port}", SECRET)
        with pytest.raises(ConnectionError, match=rf"answer from the peer at tcp:127.0.0.1:{port} failed its MAC"):
            await asyncio.wait_for(conn.sync(), 5)
        conn.close()

    with asyncio.Runner(loop_factory=lambda: new_loop(loop)) as runner:
        runner.run(main())
    thread.join(5)
    server.close()


def test_a_frame_replayed_from_another_connection_is_refused(tcp, unpickled, caplog):
    """Each connection has its own keys (the listener's nonce differs): a frame recorded on one
    does not pass on another, even as that connection's first frame."""
    first, second = RawPeer(tcp.address), RawPeer(tcp.address)
    assert first.key != second.key and SECRET not in (first.key, second.key)
    head, body = frame(0, (0,), SMALL)
    recorded = first.signed(head, body)
    first.sock.sendall(recorded)
    assert first.sync(1)
    with caplog.at_level(logging.ERROR, logger="simshard.wire"):
        second.sock.sendall(recorded)  # frame 0 of the other connection, byte for byte
        assert second.closed()
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [k for k, _ in tcp.got] == [(0,)]  # once, from the first connection
    assert "frame 0 failed its MAC" in caplog.records[0].getMessage()
    assert unpickled == []
