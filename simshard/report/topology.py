"""The alpha-beta model of the links: per mesh axis a ``Link`` (bandwidth, latency), a
``Topology`` of them, and the seconds one device spends in one collective (``record_seconds``).

Both the communication report's estimate and the Chrome trace's timeline read time from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    from .comm import CommRecord


@dataclass(frozen=True)
class Link:
    """A link's bandwidth (bytes per second) and per-message latency (seconds)."""

    bandwidth: float
    latency: float = 0.0

    def __post_init__(self):
        if not self.bandwidth > 0:
            raise ValueError(f"link bandwidth must be positive, got {self.bandwidth}")
        if self.latency < 0:
            raise ValueError(f"link latency must be >= 0, got {self.latency}")


@dataclass(frozen=True)
class Topology:
    """Per mesh axis, the link that devices differing along it use.

    ``Topology({"x": Link(25e9, 5e-6), "y": Link(300e9, 1e-6)})`` describes an inter-node axis
    ``x`` and an intra-node axis ``y``; ``default`` serves groups whose axes are not listed (and
    permutes across meshes, which name no axes).

    The alpha-beta model (``CommReport.estimate``):

    * a collective over several axes runs at the slowest of their links:
      ``beta = min bandwidth``, ``alpha = max latency``;
    * one device's time in one collective is ``t = alpha * m + b / beta`` with
      ``m = max(messages sent, messages received)`` and ``b = max(bytes sent, bytes received)``
      (full-duplex links; a device's messages share its link one after another);
    * an instruction takes as long as its slowest device, ``T_i = max_d t(i, d)``;
    * collectives do not overlap each other or compute: ``T = sum_i T_i``.

    For a direct all-gather of ``g`` even blocks of ``s`` bytes this gives
    ``(g-1) * alpha + (g-1) * s / beta``, the same as a ring's ``g-1`` steps.
    """

    links: Mapping[str, Link] = field(default_factory=dict)
    default: Link | None = None

    @staticmethod
    def uniform(bandwidth: float, latency: float = 0.0) -> "Topology":
        return Topology({}, Link(bandwidth, latency))

    def link(self, axes: Sequence[str]) -> Link:
        chosen = []
        for a in axes:
            if a in self.links:
                chosen.append(self.links[a])
            elif self.default is not None:
                chosen.append(self.default)
            else:
                raise KeyError(f"topology has no link for mesh axis {a!r} and no default (axes: {sorted(self.links)})")
        if not chosen:
            if self.default is None:
                raise KeyError("topology has no default link for a transfer that names no mesh axis")
            chosen = [self.default]
        return Link(min(c.bandwidth for c in chosen), max(c.latency for c in chosen))

    def to_dict(self) -> dict:
        return {
            "links": {a: asdict(l) for a, l in self.links.items()},
            "default": asdict(self.default) if self.default else None,
        }

    @staticmethod
    def from_dict(d: Mapping) -> "Topology":
        """The inverse of ``to_dict``: ``{"links": {axis: {"bandwidth": B/s, "latency": s}},
        "default": {...} or null}`` (``latency`` may be left out: 0)."""
        unknown = set(d) - {"links", "default"}
        if unknown:
            raise ValueError(f"topology: unknown keys {sorted(unknown)} (expected 'links' and 'default')")
        default = d.get("default")
        return Topology({a: Link(**l) for a, l in (d.get("links") or {}).items()},
                        Link(**default) if default is not None else None)


def record_seconds(r: "CommRecord", link: Link) -> float:
    """``alpha * m + b / beta`` for one device in one collective (see ``Topology``)."""
    m = max(r.messages_sent, r.messages_received)
    b = max(r.bytes_sent, r.bytes_received)
    return link.latency * m + b / link.bandwidth
