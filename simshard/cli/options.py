"""Reading the command line's values: meshes, shapes, and the topology of the time estimate.

Each reader raises ``UsageError`` with a message that says what was expected, so a mistake ends
the command with exit 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Iterable, Sequence

from simshard.errors import ShardingError
from simshard.report.topology import Link, Topology
from simshard.sharding.mesh import MAX_DEVICES, Mesh
from simshard.units import fmt_rate, fmt_seconds

from .errors import UsageError
from .quantities import BANDWIDTH, LATENCY, DIGITS, check_number, parse_bandwidth, parse_latency, parse_size, shown

__all__ = ["DEFAULT_LINK", "parse_mesh", "parse_shape", "parse_size", "parse_bandwidth", "parse_latency", "topology",
           "describe_topology", "add_topology_flags", "add_run_flags", "description", "estimating", "backend"]

# Without --topology / --bandwidth / --latency: every mesh axis is one 200 Gb/s network link
# (25 GB/s, 5 us per message), a cluster interconnect; docs/cli.md says how to describe others.
DEFAULT_LINK = Link(25e9, 5e-6)
# No array has a dimension of more elements than 18 digits count (numpy's sizes are int64).
MAX_DIM_DIGITS = 18

def parse_mesh(text: str) -> Mesh:
    """``x=2,y=4`` -> ``Mesh({"x": 2, "y": 4})`` (axes major to minor)."""
    axes = []
    for item in text.split(","):
        name, eq, size = (s.strip() for s in item.partition("="))
        if not eq or not name or not whole_number(size):
            raise UsageError(f"--mesh expects name=size pairs like x=2,y=4, got {shown(text)}")
        if len(size) > len(str(MAX_DEVICES)):  # int() of thousands of digits is slow, or refused
            raise UsageError(f"--mesh {shown(text)}: axis {name!r} of size {shown(size)} is larger than any mesh "
                             f"(at most {MAX_DEVICES} devices)")
        axes.append((name, int(size)))
    try:
        return Mesh(axes)
    except ShardingError as e:
        raise UsageError(f"--mesh {shown(text)}: {e.detail}") from None


def parse_shape(text: str) -> tuple[int, ...]:
    """``8,16``, ``8x16``, ``(8, 16)`` or ``[8, 16]`` -> ``(8, 16)``; ``()`` is a scalar."""
    body = text.strip().strip("()[]")
    parts = [p.strip() for p in re.split(r"[,x×]", body)] if body.strip() else []
    if parts and parts[-1] == "" and body.rstrip().endswith(","):
        parts.pop()  # "(8,)"
    if not all(whole_number(p) for p in parts):
        raise UsageError(f"a shape is sizes separated by commas, like 8,16; got {shown(text)}")
    if any(len(p) > MAX_DIM_DIGITS for p in parts):
        raise UsageError(f"a shape's sizes have at most {MAX_DIM_DIGITS} digits; got {shown(text)}")
    return tuple(int(p) for p in parts)


def whole_number(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes ``²`` and ``٣`` too, which ``int`` refuses or reads)."""
    return bool(text) and all(c in DIGITS for c in text)


def _per_axis(values: Iterable[str], read, flag: str) -> tuple[float | None, dict[str, float]]:
    """``["y=300GB/s", "25GB/s"]`` (or comma-joined) -> (default, {axis: value})."""
    default, per = None, {}
    for value in values:
        for item in value.split(","):
            axis, eq, amount = item.rpartition("=")
            try:
                if eq:
                    per[axis.strip()] = read(amount)
                else:
                    default = read(amount)
            except UsageError as e:
                raise UsageError(f"{flag}: {e}") from None
    return default, per


def topology(file: str | None, bandwidth: Sequence[str], latency: Sequence[str], axes: Iterable[str]) -> Topology:
    """The topology the estimate uses: ``--topology FILE`` (``Topology.to_dict``'s JSON), or
    ``--bandwidth`` / ``--latency`` (``[AXIS=]VALUE``, repeatable or comma-separated; without an
    axis: every axis not named), or ``DEFAULT_LINK`` for every axis. Axes a file or flag leaves
    out take its default, else ``DEFAULT_LINK``'s. ``axes``: the mesh axes, to catch typos."""
    axes = list(dict.fromkeys(axes))
    if file is not None and (bandwidth or latency):
        raise UsageError("give the links either in --topology FILE or with --bandwidth / --latency, not both")
    if file is not None:
        topo = read_topology_file(file)
        links, default, nodes, device = dict(topo.links), topo.default or DEFAULT_LINK, topo.nodes, topo.device
    else:
        bw_default, bw = _per_axis(bandwidth, parse_bandwidth, "--bandwidth")
        lat_default, lat = _per_axis(latency, parse_latency, "--latency")
        default = Link(bw_default if bw_default is not None else DEFAULT_LINK.bandwidth,
                       lat_default if lat_default is not None else DEFAULT_LINK.latency)
        links = {a: Link(bw.get(a, default.bandwidth), lat.get(a, default.latency)) for a in dict.fromkeys([*bw, *lat])}
        nodes = device = None
    unknown = sorted(set(links) - set(axes))
    if unknown and axes:
        raise UsageError(f"the topology names mesh axes {', '.join(map(shown, unknown))} that the mesh does not have "
                         f"(axes: {', '.join(axes)})")
    return Topology({a: links[a] for a in axes if a in links}, default, nodes, device)  # in mesh order


def read_topology_file(file: str) -> Topology:
    """``--topology FILE``: ``Topology.to_dict``'s JSON, with units allowed (``_link_dict``); any
    mistake in it is a one-line UsageError naming the file."""
    try:
        with open(file) as f:
            data = json.load(f)
        nodes = data.get("nodes")
        data = {**data, "links": {a: _link_dict(l) for a, l in (data.get("links") or {}).items()},
                "default": _link_dict(data["default"]) if data.get("default") is not None else None}
        if nodes is not None:
            data["nodes"] = {**nodes, "link": _link_dict(nodes.get("link"))}
        return Topology.from_dict(data)
    except OSError as e:
        raise UsageError(f"--topology: cannot read {file!r}: {e.strerror}") from None
    except RecursionError:  # json's reader recurses once per bracket
        raise UsageError(f"--topology {file}: its JSON is nested too deeply to be a topology") from None
    except UsageError as e:
        raise UsageError(f"--topology {file}: {e}") from None
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
        raise UsageError(f"--topology {file}: expected {{\"links\": {{axis: {{\"bandwidth\": B/s, \"latency\": s}} "
                         f"or a link class}}, \"default\": {{...}}, \"nodes\": {{\"size\": devices, \"link\": ...}}}}: "
                         f"{e}") from None


def _link_dict(link) -> dict:
    """A link of a topology file: numbers, strings with units ("25GB/s", "5us"), or the name of
    a link class ("nvlink", "infiniband": report/topology.py's LINK_CLASSES); its values within
    the bounds the flags have (quantities.py)."""
    if isinstance(link, str):
        return link
    if not isinstance(link, dict):
        raise ValueError(f"a link is an object with bandwidth and latency, or a link class name, got {shown(repr(link))}")
    out = dict(link)
    for key, parse, bound in (("bandwidth", parse_bandwidth, BANDWIDTH), ("latency", parse_latency, LATENCY)):
        if key in out:
            out[key] = parse(out[key]) if isinstance(out[key], str) else check_number(out[key], bound)
    return out


def describe_topology(topo: Topology) -> str:
    """``y: 300.00 GB/s + 1.00 us/message; other axes: 25.00 GB/s + 5.00 us/message``."""
    def link(l: Link) -> str:
        return f"{fmt_rate(l.bandwidth)} + {fmt_seconds(l.latency)}/message"

    parts = [f"{a}: {link(l)}" for a, l in topo.links.items()]
    if topo.default is not None:
        parts.append(f"{'other axes' if parts else 'every axis'}: {link(topo.default)}")
    if topo.nodes is not None:
        how = "hierarchical collectives" if topo.library == "direct" else "collectives across nodes as NCCL runs them"
        parts.append(f"nodes of {topo.nodes.size} devices, joined by {link(topo.nodes.link)} ({how})")
    if topo.library == "direct":
        parts.append("collectives timed as simshard's direct algorithms")
    return "; ".join(parts)


def add_topology_flags(parser) -> None:
    """--topology FILE, or --bandwidth / --latency."""
    group = parser.add_argument_group("topology of the time estimate (default: every axis 25GB/s + 5us/message)")
    ex = group.add_mutually_exclusive_group()
    ex.add_argument("--topology", metavar="FILE",
                    help='JSON: {"links": {"x": {"bandwidth": "25GB/s", "latency": "5us"}}, "default": {...}}')
    ex.add_argument("--bandwidth", action="append", default=[], metavar="[AXIS=]RATE",
                    help="link bandwidth, e.g. 25GB/s or y=300GB/s (repeatable; without AXIS: every other axis)")
    group.add_argument("--latency", action="append", default=[], metavar="[AXIS=]TIME",
                       help="per-message latency, e.g. 5us or y=1us (repeatable)")


def description(doc: str) -> str:
    """A command's ``--help`` text: its module docstring's first paragraph, without rst quotes."""
    return " ".join(doc.split("\n\n")[0].replace("``", "").split())


def add_run_flags(parser) -> None:
    """The flags of commands that run strategies: mesh, backend, verdict, JSON, topology, quiet."""
    parser.add_argument("--mesh", metavar="x=2,y=4", help="mesh axes and sizes (default: the strategy's or program's mesh)")
    parser.add_argument("--backend", choices=("ray", "local"), default=None,
                        help="ray: one actor per device (default; SIMSHARD_BACKEND changes it); local: one process")
    parser.add_argument("--address", metavar="ADDR", help="join this Ray cluster (implies --backend ray)")
    parser.add_argument("--devices-per-process", metavar="K", type=int, default=None,
                        help="ray: K consecutive devices of the mesh share one worker process, their messages "
                             "staying in it (must divide the device count; default: as few per process as leave "
                             "each process a core of this machine)")
    parser.add_argument("--exact", action="store_true",
                        help="require identical bits: a float sum reassociated by the sharding fails (exit 1) "
                             "instead of passing with its ULP distance")
    parser.add_argument("--device-memory", metavar="SIZE", type=_size_arg,
                        help="each device's capacity, e.g. 8KiB: a device whose live buffers exceed it fails "
                             "the run as out of memory (exit 3); with --estimate, the peak is judged against it")
    parser.add_argument("--node-axes", metavar="a,b", type=_axes_arg,
                        help="ray, on a cluster: the devices sharing every coordinate of these mesh axes share a "
                             "node, so only these axes cross nodes (cluster/README.md)")
    parser.add_argument("--algorithm", choices=("direct", "ring", "oneshot"), default="direct",
                        help="how collectives move their data (docs/runtime.md): direct (default, every device "
                             "at the analytic minimum), ring (messages to ring neighbours only), oneshot "
                             "(all-reduce in one step: half the messages, more bytes)")
    parser.add_argument("--mode", choices=("forward", "sgd", "adam"), default=None,
                        help="run the forward pass, or a training step (value_and_grad, then SGD or Adam) where "
                             "the program has one (default: run forward; compare the SGD step where there is one)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON (docs/json-schema.md)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    parser.add_argument("--estimate", action="store_true",
                        help="do not run: cost the strategies from their partitioned schedules alone (ss.estimate: "
                             "the communication and memory a run records, on a mesh of any size; nothing verified)")
    add_topology_flags(parser)


def estimating(args) -> bool:
    """``--estimate`` (or the ``estimate`` command), checked against the flags only a run honours."""
    if not getattr(args, "estimate", False):
        return False
    if args.algorithm != "direct":
        raise UsageError(f"--estimate models the direct collectives only, not --algorithm {args.algorithm}")
    for flag, value in (("--address", args.address), ("--devices-per-process", args.devices_per_process),
                        ("--node-axes", getattr(args, "node_axes", None))):
        if value is not None:
            raise UsageError(f"{flag} applies to a run; --estimate runs nothing")
    return True


def _axes_arg(text: str) -> tuple[str, ...]:
    """argparse type for --node-axes: mesh axis names, comma-separated."""
    axes = tuple(a.strip() for a in text.split(","))
    if not all(axes):
        raise argparse.ArgumentTypeError(f"--node-axes {text!r}: mesh axis names separated by commas, e.g. host")
    return axes


def _size_arg(text: str) -> int:
    """argparse type for --device-memory: its error is argparse's usage error (exit 2)."""
    try:
        return parse_size(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def backend(args) -> str:
    """``--backend``, else ``ray`` with ``--address``, else the runtime's default (ray, or
    ``SIMSHARD_BACKEND``)."""
    if getattr(args, "node_axes", None) is not None and args.backend == "local":
        raise UsageError("--node-axes places Ray device actors on the nodes of a cluster; the local backend runs "
                         "every device in this process")
    if getattr(args, "devices_per_process", None) is not None and args.backend == "local":
        raise UsageError("--devices-per-process places Ray device actors; the local backend runs every device "
                         "in this process already")
    if args.address is not None:
        if args.backend == "local":
            raise UsageError("--address names a Ray cluster; it does not go with --backend local")
        return "ray"
    if args.backend is not None:
        return args.backend
    from simshard.runtime.front.api import default_backend  # the runtime: ~40 ms of asyncio and sockets, not for --help

    chosen = default_backend()
    if chosen not in ("ray", "local"):
        raise UsageError(f"SIMSHARD_BACKEND={chosen!r}: choose ray or local")
    return chosen
