"""The Ray transport: one device's side of sending and receiving between device actors.

A send is fire-and-forget (``RayTransport._deliver``): to a device of another process on the
sockets data plane, a frame on the socket to its process (``wire/sockets.py``: a Unix socket on
this node, a large array in shared memory; TCP to another node); on the ray data plane, a Ray
call on its ``deliver``, the array travelling as a Ray object (``ray.put`` once per instruction,
from ``INLINE_BYTES`` up) or inline below that; to a device of the same host a task of this event
loop, the array copied (``LocalPeer``). A receive waits on the device's own mailbox with the
receive timeout. The collectives and the executor above it are the local backend's, so outputs
and communication records are the same, bit for bit and byte for byte.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.mailbox import Message
from ...core.transport import Transport
from ...core.transport_errors import PeerLost, RecvTimeout, TransportError
from .peers import RING_ROUTE
from ...wire.shared_memory import SHM_BYTES
from ..put_once import PutOnce
from ..start import INLINE_BYTES


class RayTransport(Transport):
    """One device's side of the Ray transport: sends are fire-and-forget calls on the receiving
    actor's ``deliver``; receives wait on this device's mailbox. Its log holds this device's
    transfers only."""

    def __init__(self, device: int, peers: Mapping[int, Any], run_id: int, mailbox, timeout, dead: set,
                 shared=None, connections=()):
        super().__init__(timeout)
        self.dead = dead  # devices the controller reported dead: waiting for them fails at once
        self.lost: tuple | None = None  # (source, key) of the receive a dead peer failed
        self.device = device
        self.peers = peers
        self.run_id = run_id
        self.mailbox = mailbox
        self.waiting: dict[tuple, float] = {}  # (source, key) -> since when
        self.peer_where: dict[int, str] = {}  # what a silent peer said when asked
        self._puts_for, self._puts = None, PutOnce()  # the instruction whose arrays _puts holds
        self._shared = shared  # SharedBlocks: the device's shared-memory files for large socket messages
        self.cancelled_in: tuple | None = None  # (source, key) of the receive an abort cancelled
        self.connections = connections  # the process's sockets to other processes (``lends``)
        # route ("process", "unix", "tcp", "ray": ``peers.route``) -> messages this device sent by it
        # in this run, counted where each message goes: what a run's messages took, not what was meant
        self.taken: dict[str, int] = {}
        # messages this device took from other devices in this run: the driver checks that every
        # message sent was taken (``failures.check_delivered``) by comparing the counts, so a device
        # finishing asks its peers nothing (a round trip per peer process, and a wakeup of each)
        self.received = 0

    def _deliver(self, msg: Message) -> None:
        if msg.dst == self.device:
            self.mailbox.put(Message(msg.src, msg.dst, msg.key, self.mailbox.copy_in(msg.src, msg.key, msg.array),
                                     msg.tag, msg.note))
            return
        peer = self.peers.get(msg.dst)
        if peer is None:
            raise TransportError(f"device {msg.dst} is not one of this mesh's devices {sorted(self.peers)}")
        # counted per route (``peers.route``; "unix ring": a frame that went by the socket's ring of
        # frames). No answer is awaited or kept: a message its receiver never took (it had
        # finished, say) shows in the counts the driver compares (``received``)
        via = peer.via
        if peer.local:  # a device of this process takes its own copy, as a self-send gets
            peer.target.deliver_now(self.run_id, msg.src, msg.key, msg.array, msg.tag, msg.note, copy=True)
        elif getattr(peer, "socket", False):  # a frame on the socket to the peer's process
            ringed = peer.connection.ringed
            self._frame(peer, msg)
            if peer.connection.ringed != ringed:
                via = RING_ROUTE
        else:
            payload = self._payload(msg) if msg.array.nbytes >= INLINE_BYTES else msg.array
            peer.deliver.remote(self.run_id, msg.src, msg.key, payload, msg.tag, msg.note)
        self.taken[via] = self.taken.get(via, 0) + 1

    def _frame(self, peer, msg: Message) -> int:
        """Send ``msg`` on the socket to ``peer``'s process, a large array in shared memory
        (written once per instruction however many peers it goes to, into one of the device's
        files its readers have let go of): the frame's number."""
        shared = None
        if msg.array.nbytes >= SHM_BYTES and self._shared is not None and peer.connection.shared_prefix:
            shared = self._shared.put(msg.array, scope=msg.key[0])
        return peer.connection.send(self.run_id, msg.src, peer.device, msg.key, msg.array, msg.tag, msg.note,
                                    shared=shared)

    def lends(self, owner: np.ndarray) -> bool:
        return any(c.lends(owner) for c in self.connections)

    def expect(self, dst: int, src: int, key, out: np.ndarray) -> None:
        """The place ``out`` offered to whoever writes the message (a socket frame's reader, a
        device of this process copying it in); a Ray object is read where it is."""
        self.mailbox.expect(src, key, out)

    def release(self) -> None:
        """Forget the arrays this run wrote to shared memory (the files stay for the next), and
        have the space of bodies put into a ring freed once their receivers answer (``settle``:
        nothing waits for it)."""
        if self._shared is not None:
            self._shared.release()
        for c in self.connections:
            c.settle()

    def _payload(self, msg: Message):
        """The array as a Ray object, put once per instruction however many peers it goes to
        (an all-gather's block, an all-reduce's finished chunk): every receiver on a node
        reads the same object, as Ray moves one object to many actors."""
        if self._puts_for != msg.key[0]:
            self._puts_for, self._puts = msg.key[0], PutOnce()
        return self._puts(msg.array)

    async def _collect(self, dst: int, src: int, key, timeout) -> Message:
        if src != self.device and src not in self.peers:
            raise TransportError(f"device {src} is not one of this mesh's devices {sorted(self.peers)}")
        self.waiting[(src, key)] = time.monotonic()
        try:
            if src in self.dead and not self.mailbox.has(src, key):
                raise PeerLost(dst, src, key)
            msg = await self.mailbox.get(src, key, timeout)
            if src != self.device:
                self.received += 1
            return msg
        except PeerLost:
            self.lost = (src, key)
            raise
        except RecvTimeout:
            self.peer_where[src] = await self._ask_where(src)
            raise
        except asyncio.CancelledError:
            self.cancelled_in = (src, key)  # an aborted device still says whom it waited for
            raise
        finally:
            self.waiting.pop((src, key), None)

    async def _ask_where(self, src: int) -> str:
        try:
            return await asyncio.wait_for(self.peers[src].where.remote(self.run_id), 5.0)
        except asyncio.TimeoutError:
            return "not answering (its actor did not reply within 5 s)"
        except Exception as e:  # a dead actor
            return f"unreachable ({type(e).__name__}: its actor is gone)"

