"""How a device of a host process reaches another device: a device of the same process
(``LocalPeer``: straight into its mailbox), of another process over the socket between the two
(``SocketPeer``), or through Ray actor calls (``RemotePeer``). Each is called like an actor
(``peer.deliver.remote(...)``), so the transport treats them alike."""

from __future__ import annotations

import asyncio


RING_ROUTE = "unix ring"  # a message counted by route: its frame went by its socket's ring (``wire/frame_rings``)


def route(peer) -> str:
    """How messages reach ``peer``: "process" (a device of this process), "unix" (this node's
    socket), "tcp" (another node's socket) or "ray" (actor calls: the ray data plane, or a
    socket that would not open). Read from the peer itself (``via``), not from its class: these
    classes travel by value to the device processes, where the copy that built a peer and the one
    a module imported after ``bootstrap`` sees are different classes."""
    return peer.via


class RemoteMethod:
    """``peer.deliver.remote(...)`` on a device of another host: its host's method, the device named."""

    def __init__(self, method, device: int):
        self.method, self.device = method, device

    def remote(self, *args):
        return self.method.remote(self.device, *args)


class RemotePeer:
    """A device of another host, called like an actor of its own."""

    local = False
    via = "ray"

    def __init__(self, handle, device: int):
        self.handle, self.device = handle, device

    def __getattr__(self, name: str) -> RemoteMethod:
        return RemoteMethod(getattr(self.handle, name), self.device)


class SocketPeer(RemotePeer):
    """A device of another process: its messages go over the socket between the two processes
    (``runtime/wire/sockets.py``, ``RayTransport._frame``: a Unix socket on this node, TCP to
    another); every other call through Ray."""

    socket = True

    def __init__(self, handle, device: int, connection):
        super().__init__(handle, device)
        self.connection = connection
        self.via = "tcp" if connection.address.startswith("tcp:") else "unix"


class LocalMethod:
    """A method of a device of this process, called like an actor's: a task of this event loop."""

    def __init__(self, coro_fn):
        self.coro_fn = coro_fn

    def remote(self, *args):
        return asyncio.ensure_future(self.coro_fn(*args))  # awaitable, as an ObjectRef is


class LocalPeer:
    """A device of this host: a message goes straight into its mailbox (``RayTransport`` calls
    ``target.deliver_now``), its other methods run as tasks of this event loop; no Ray call."""

    local = True
    via = "process"

    def __init__(self, device):
        self.target = device

    def __getattr__(self, name: str) -> LocalMethod:
        return LocalMethod(getattr(self.target, name))


