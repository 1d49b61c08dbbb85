"""Moved: the transport interface is ``simshard.runtime.core.transport``, mailboxes
``core.mailbox``, transport errors ``core.transport_errors``, the transfer log
``core.transfer_log``, the in-memory transport ``simshard.runtime.local.in_memory``. This old path
re-exports their names."""

from .core.mailbox import Mailbox, Message, is_lent
from .core.transfer_log import Key, PeerTotals, Totals, Transfer, TransferLog
from .core.transport import Transport
from .core.transport_errors import (
    Deadlock, DuplicateMessage, PeerFinished, PeerLost, RecvTimeout, TagMismatch, TransportError,
)
from .local.in_memory import InMemoryTransport

__all__ = [
    "Deadlock", "DuplicateMessage", "InMemoryTransport", "Key", "Mailbox", "Message", "PeerFinished", "PeerLost",
    "PeerTotals", "RecvTimeout", "TagMismatch", "Totals", "Transfer", "TransferLog", "Transport", "TransportError",
    "is_lent",
]
