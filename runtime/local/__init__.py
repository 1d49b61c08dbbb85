"""The local backend: every device's schedule as an asyncio task of one event loop in this
process, exchanging messages through an ``InMemoryTransport``; ``LocalMesh`` keeps its devices
for compiled programs and device arrays."""

from ..core.execution import Execution
from .backend import execute_local, run_local
from .in_memory import InMemoryTransport
from .mesh import LocalMesh

__all__ = ["Execution", "InMemoryTransport", "LocalMesh", "execute_local", "run_local"]
