"""Moved: ``RayTransport`` is ``simshard.runtime.ray.host.transport``, ``PutOnce``
``simshard.runtime.ray.put_once``. This old path re-exports their names."""

from .ray.put_once import PutOnce
from .ray.host.transport import RayTransport

__all__ = ["PutOnce", "RayTransport"]
