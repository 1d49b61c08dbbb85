"""Moved: the device host is ``simshard.runtime.ray.host`` (``DeviceHost`` in ``device_host``,
``HostedDevice`` in ``device``, the peers in ``peers``). This old path re-exports their names."""

from .ray.host.device import HostedDevice
from .ray.host.device_host import CONNECT_SECONDS, DeviceHost
from .ray.host.peers import LocalPeer, RemotePeer, SocketPeer

__all__ = ["CONNECT_SECONDS", "DeviceHost", "HostedDevice", "LocalPeer", "RemotePeer", "SocketPeer"]
