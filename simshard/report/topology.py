"""The alpha-beta model of the links: per mesh axis a ``Link`` (bandwidth, latency), a
``Topology`` of them, and the seconds one device spends in one collective (``Topology.seconds``).

Links may be named by class (``LINK_CLASSES``: NVLink, PCIe, InfiniBand, Ethernet). A topology
with ``Nodes`` groups consecutive devices into nodes joined by a slower link; a collective whose
group spans nodes is costed as the hierarchical algorithm a real library runs there (inside each
node on the axes' link, across nodes on the node link), not as the flat one simshard executes.

Both the communication report's estimate and the Chrome trace's timeline read time from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from .algorithms import CANDIDATES, Choice, Span, fastest, payload
from .compute import DeviceSpec, device_of, finite_number

LIBRARIES = ("nccl", "direct")  # how a topology times collectives (``Topology.library``)

if TYPE_CHECKING:
    from .comm import CommRecord


@dataclass(frozen=True)
class Link:
    """A link's bandwidth (bytes per second) and per-message latency (seconds)."""

    bandwidth: float
    latency: float = 0.0

    def __post_init__(self):
        finite_number(self.bandwidth, "a link's bandwidth")
        finite_number(self.latency, "a link's latency")
        if not self.bandwidth > 0:
            raise ValueError(f"link bandwidth must be positive, got {self.bandwidth}")
        if self.latency < 0:
            raise ValueError(f"link latency must be >= 0, got {self.latency}")


# Link classes, per device and direction (what one device can push on it), with a per-message
# latency of the order the hardware's software stacks reach. Sources: NVIDIA's H100 NVLink 4
# (900 GB/s both ways), PCIe 5.0 x16 (64 GB/s each way), InfiniBand NDR (400 Gb/s a port), 100 GbE.
LINK_CLASSES: dict[str, Link] = {
    "nvlink": Link(450e9, 1e-6),
    "pcie": Link(64e9, 2e-6),
    "infiniband": Link(50e9, 5e-6),
    "ethernet": Link(12.5e9, 10e-6),
}


def link_of(spec) -> Link:
    """A ``Link``, the name of a link class, or ``{"bandwidth": B/s, "latency": s}``."""
    if isinstance(spec, Link):
        return spec
    if isinstance(spec, str):
        try:
            return LINK_CLASSES[spec]
        except KeyError:
            raise ValueError(f"unknown link class {spec!r} (known: {', '.join(LINK_CLASSES)})") from None
    if isinstance(spec, dict):
        return Link(**spec)
    raise ValueError(f"a link is a Link, a link class name or a dict of bandwidth and latency, got {spec!r}")


@dataclass(frozen=True)
class Nodes:
    """Devices in mesh order, ``size`` consecutive ones to a node; nodes talk over ``link``."""

    size: int
    link: Link

    def __post_init__(self):
        size = finite_number(self.size, "a node's size")
        if size != int(size) or size < 1:
            raise ValueError(f"a node holds a whole number of devices, at least one, got size {self.size!r}")
        object.__setattr__(self, "size", int(self.size))
        object.__setattr__(self, "link", link_of(self.link))


@dataclass(frozen=True)
class Topology:
    """Per mesh axis, the link that devices differing along it use.

    ``Topology({"x": Link(25e9, 5e-6), "y": Link(300e9, 1e-6)})`` describes an inter-node axis
    ``x`` and an intra-node axis ``y``; ``default`` serves groups whose axes are not listed (and
    permutes across meshes, which name no axes).

    The alpha-beta model (``CommReport.estimate``):

    * a collective over several axes runs at the slowest of their links:
      ``beta = min bandwidth``, ``alpha = max latency``;
    * under ``library="nccl"`` (the default) a collective takes the time of the fastest
      algorithm an NCCL-like library has for it on the group's span of nodes
      (``report/algorithms.py``, derived in docs/estimate.md), the chosen one named in the
      estimate; under ``library="direct"``, what follows, the algorithms simshard executes:
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
    nodes: Nodes | None = None
    device: DeviceSpec | None = None  # the devices' compute (report/compute.py), for compute and step times
    # how collectives are timed: "nccl", as an NCCL-like library runs them (ring, tree or
    # hierarchical, the fastest; report/algorithms.py), or "direct", the algorithms simshard executes
    library: str = "nccl"

    def __post_init__(self):
        if self.library not in LIBRARIES:
            raise ValueError(f"topology library {self.library!r}: expected one of {', '.join(LIBRARIES)}")
        object.__setattr__(self, "links", {a: link_of(l) for a, l in self.links.items()})
        if self.default is not None:
            object.__setattr__(self, "default", link_of(self.default))
        if self.device is not None:
            object.__setattr__(self, "device", device_of(self.device))

    @staticmethod
    def uniform(bandwidth: float, latency: float = 0.0) -> "Topology":
        return Topology({}, Link(bandwidth, latency))

    def link(self, axes: Sequence[str]) -> Link:
        chosen = []
        for a in axes:
            a = a.split(":")[0]  # a sub-axis ("y:(4)2") travels on its axis's link
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

    def seconds(self, r: "CommRecord") -> float:
        """One device's time in one collective (``choice``)."""
        return self.choice(r).seconds

    def choice(self, r: "CommRecord") -> Choice:
        """The algorithm one collective runs and one device's time in it: under ``"nccl"`` the
        fastest of the library's algorithms on the group's span of nodes (``algorithms.fastest``),
        a permute point to point; under ``"direct"`` the flat formula on the axes' link, or the
        hierarchical one when ``nodes`` puts the group on several nodes."""
        link = self.link(r.axes)
        if self.library == "direct" or r.kind not in CANDIDATES:
            if self.nodes is None:
                return Choice("direct", record_seconds(r, link))
            return Choice("direct", hierarchical_seconds(r, link, self.nodes))
        span = self.span(r.group, link)
        return fastest(r.kind, span, payload(r.kind, len(r.group), r.min_bytes))

    def span(self, group: Sequence[int], link: Link) -> Span:
        """``group`` as the algorithms see it: its devices per node and nodes, the links inside and
        between nodes (without nodes, or spread unevenly over them, each device its own node)."""
        if self.nodes is None:
            return Span(1, len(group), link.latency, link.bandwidth, link.latency, link.bandwidth)
        per_node: dict[int, int] = {}
        for dev in group:
            per_node[dev // self.nodes.size] = per_node.get(dev // self.nodes.size, 0) + 1
        out = self.nodes.link
        if len(per_node) == 1:
            return Span(len(group), 1, link.latency, link.bandwidth, out.latency, out.bandwidth)
        if len(set(per_node.values())) != 1:
            return Span(1, len(group), link.latency, link.bandwidth, out.latency, out.bandwidth)
        a = next(iter(per_node.values()))
        return Span(a, len(per_node), link.latency, link.bandwidth, out.latency, out.bandwidth)

    def to_dict(self) -> dict:
        out = {
            "links": {a: asdict(l) for a, l in self.links.items()},
            "default": asdict(self.default) if self.default else None,
        }
        if self.nodes is not None:
            out["nodes"] = {"size": self.nodes.size, "link": asdict(self.nodes.link)}
        if self.device is not None:
            out["device"] = asdict(self.device)
        if self.library != "nccl":
            out["library"] = self.library
        return out

    @staticmethod
    def from_dict(d: Mapping) -> "Topology":
        """The inverse of ``to_dict``: ``{"links": {axis: {"bandwidth": B/s, "latency": s}},
        "default": {...} or null}`` (``latency`` may be left out: 0)."""
        unknown = set(d) - {"links", "default", "nodes", "device", "library"}
        if unknown:
            raise ValueError(f"topology: unknown keys {sorted(unknown)} (expected 'links', 'default', 'nodes', 'device', "
                             "'library')")
        default, nodes, device = d.get("default"), d.get("nodes"), d.get("device")
        return Topology({a: link_of(l) for a, l in (d.get("links") or {}).items()},
                        link_of(default) if default is not None else None,
                        Nodes(nodes["size"], nodes["link"]) if nodes is not None else None,
                        device_of(device) if device is not None else None, d.get("library", "nccl"))


def record_seconds(r: "CommRecord", link: Link) -> float:
    """``alpha * m + b / beta`` for one device in one collective (see ``Topology``)."""
    m = max(r.messages_sent, r.messages_received)
    b = max(r.bytes_sent, r.bytes_received)
    return link.latency * m + b / link.bandwidth


def hierarchical_seconds(r: "CommRecord", intra: Link, nodes: Nodes) -> float:
    """One device's time in a collective whose group spans ``a`` devices on each of ``b`` nodes
    (``g = a b``), run hierarchically, for a payload ``N`` recovered from the record's analytic
    minimum (docs/cost-model.md):

    * all-reduce: reduce-scatter and all-gather inside the node, all-reduce of ``N/a`` across:
      ``2(a-1)(alpha_i + N/(a beta_i)) + 2(b-1)(alpha_o + N/(a b beta_o))``;
    * all-gather (``N`` the gathered result) and reduce-scatter (``N`` the reduced buffer): the
      ``N/g`` blocks across nodes first, then ``N/a`` inside: ``(b-1)(alpha_o + N/(g beta_o)) +
      (a-1)(alpha_i + N/(a beta_i))``;
    * all-to-all (``B`` each device's buffer): ``B/g`` to each of ``a-1`` node peers and ``g-a``
      others: ``(a-1)(alpha_i + B/(g beta_i)) + (g-a)(alpha_o + B/(g beta_o))``;
    * collective-permute: the flat formula, on the node link if a pair crosses nodes.

    A group inside one node, or spread unevenly over nodes, takes the flat formula (on the node
    link when it spans nodes)."""
    per_node: dict[int, int] = {}
    for dev in r.group:
        per_node[dev // nodes.size] = per_node.get(dev // nodes.size, 0) + 1
    b = len(per_node)
    if b == 1:
        return record_seconds(r, intra)
    if r.kind == "collective_permute" or len(set(per_node.values())) != 1:
        return record_seconds(r, nodes.link)
    g, a = len(r.group), next(iter(per_node.values()))
    out, inn = nodes.link, intra
    if r.kind == "all_reduce":
        n = r.min_bytes * g / (2 * (g - 1))
        return 2 * (a - 1) * (inn.latency + n / (a * inn.bandwidth)) + 2 * (b - 1) * (out.latency + n / (g * out.bandwidth))
    if r.kind in ("all_gather", "reduce_scatter"):
        n = r.min_bytes * g / (g - 1)
        return (b - 1) * (out.latency + n / (g * out.bandwidth)) + (a - 1) * (inn.latency + n / (a * inn.bandwidth))
    if r.kind == "all_to_all":
        n = r.min_bytes * g / (g - 1)
        return (a - 1) * (inn.latency + n / (g * inn.bandwidth)) + (g - a) * (out.latency + n / (g * out.bandwidth))
    return record_seconds(r, out)

