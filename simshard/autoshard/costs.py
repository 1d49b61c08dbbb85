"""Seconds the search weighs: an op's compute under a strategy, and moving a value between two
layouts, each by the estimate's own function.

* Compute: the ``Work`` of the op on the local blocks the strategy gives it
  (``report.compute.op_work``: FLOPs, bytes, kernel kind, matmul shape, dtype), timed on the
  device (``Work.seconds``: tiles, waves and split-K for a matmul on a device class, the
  achieved bandwidth for element-wise work, nothing for layout ops; the roofline on a device
  given by its peaks alone): what the estimate counts for each compute instruction.
* A reshard: the reshard planner's plan (``partition.plan_reshard``, the exact steps a run would
  take, pending reductions included), each collective step written as the record its busiest
  device would produce and timed by ``Topology.choice`` (``collectives.py``): under the default
  ``library="nccl"`` the fastest of ring, tree and hierarchical for its size and group, under
  ``"direct"`` the algorithms simshard executes; groups spanning ``Topology.nodes`` as the
  estimate spans them.

Plans are cached per pair of layouts and shape for one search, and planned on a small shape of
the same divisibility (``ReshardCosts``).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.program import Aval, Eqn
from ..partition import plan_reshard
from ..report.compute import DeviceSpec, op_work
from ..report.topology import Topology
from ..sharding.dims import Sharding
from ..sharding.mesh import Mesh
from . import symmetry
from .candidates import OpCandidate, local_bytes
from .closed_form import closed_form_seconds
from .collectives import Collective, collective_seconds, groups_to_time

LAYOUT_FREE = ("scan",)  # structured ops priced through their bodies


def local_shape(s: Sharding, shape) -> tuple[int, ...]:
    return tuple(-(-n // s.shard_count(d)) for d, n in enumerate(shape))


def compute_seconds(eqn: Eqn, cand: OpCandidate, device: DeviceSpec) -> float:
    """One device's time running ``eqn`` as ``cand`` lays it out: the ``Work`` of its local op
    (``report.compute.op_work``: its kind, matmul shape and dtype) timed on the device
    (``Work.seconds``: the kernel model on a device class, else the roofline), as the estimate
    times each compute instruction."""
    if eqn.op in LAYOUT_FREE:
        return 0.0
    ins = [local_shape(s, x.aval.shape) for s, x in zip(cand.operands, eqn.inputs)]
    outs = [local_shape(s, v.aval.shape) for s, v in zip(cand.results, eqn.outputs)]
    in_bytes = sum(local_bytes(s, x.aval) for s, x in zip(cand.operands, eqn.inputs))
    out_bytes = sum(local_bytes(s, v.aval) for s, v in zip(cand.results, eqn.outputs))
    dtype = np.dtype(eqn.outputs[0].aval.dtype).name if eqn.outputs else "float32"
    return op_work(eqn.op, ins, outs, eqn.kw, dtype, in_bytes, out_bytes).seconds(device)


class ReshardCosts:
    """Seconds to move a value between two layouts under ``topology``, per mesh-axis link.

    Even layouts move bytes in proportion to the tensor's size, so a pair is planned once on the
    smallest shape with the same divisibility by the mesh (each dim ``gcd(n, devices)``) and its
    bytes scaled up (``plan_seconds``); pairs are cached by the layouts' identity (``intern``
    gives each distinct layout one object). ``planner=False`` prices a pair by the planner's
    structured path in closed form instead (``closed_form``), for searches over many devices."""

    def __init__(self, topology: Topology, mesh_size: int, planner: bool = True, mesh: Mesh | None = None):
        self.topology, self.mesh_size, self.planner = topology, mesh_size, planner
        # renamings of the mesh's axes that change no planned price: a pair planned once per orbit
        self.mesh, self.renamings = mesh, (symmetry.of(mesh, topology) if mesh is not None and planner else ())
        self.orbits: dict = {}  # (a pair's orbit, shape, itemsize) -> seconds per link, in the orbit's names
        self.keys: dict[int, tuple] = {}  # id of a layout -> (it, its ``symmetry.keys``)
        self.cache: dict = {}
        self.canonical: dict[Sharding, Sharding] = {}
        self.collectives: dict = {}  # the closed form's memo of each collective's seconds

    def intern(self, s: Sharding) -> Sharding:
        return self.canonical.setdefault(s, s)

    def by_link(self, src: Sharding, dst: Sharding, aval: Aval) -> dict[tuple[str, ...], float]:
        """Seconds per set of mesh axes the plan's collectives run over."""
        if src is dst or src == dst:
            return {}
        key = (id(src), id(dst), aval.shape, aval.dtype.itemsize)
        hit = self.cache.get(key)
        if hit is None and not self.planner:
            hit = self.cache[key] = closed_form_seconds(src, dst, local_bytes(src, aval), self.topology, self.collectives)
        if hit is None:
            hit = self.cache[key] = self.planned(src, dst, aval)
        return hit

    def planned(self, src: Sharding, dst: Sharding, aval: Aval) -> dict[tuple[str, ...], float]:
        """``plan_seconds`` of the pair, on the smallest shape of the same divisibility (see the
        class), once per orbit of the mesh's equal axes (``symmetry``), charged to the pair's own axes."""
        small = tuple(math.gcd(n, self.mesh_size) for n in aval.shape)
        scale = math.prod(aval.shape) / max(math.prod(small), 1)
        if not self.renamings:
            return plan_seconds(src, dst, small, aval.dtype, self.topology, scale)
        orbit = symmetry.canonical(src, dst, self.renamings, self.keys_of(src), self.keys_of(dst))
        key = (orbit.key, aval.shape, aval.dtype.itemsize)
        hit = self.orbits.get(key)
        if hit is None:
            hit = self.orbits[key] = plan_seconds(symmetry.renamed(src, orbit.renaming), symmetry.renamed(dst, orbit.renaming),
                                                  small, aval.dtype, self.topology, scale)
        return {symmetry.axes_back(axes, orbit.renaming, self.mesh): s for axes, s in hit.items()}

    def keys_of(self, s: Sharding) -> tuple[tuple, ...]:
        """``symmetry.keys`` of a layout, made once (kept with the layout: its id is not reused)."""
        hit = self.keys.get(id(s))
        if hit is None or hit[0] is not s:
            hit = self.keys[id(s)] = (s, symmetry.keys(s, self.renamings))
        return hit[1]

    def seconds(self, src: Sharding, dst: Sharding, aval: Aval) -> float:
        return sum(self.by_link(src, dst, aval).values())


def plan_seconds(src: Sharding, dst: Sharding, shape, dtype, topology: Topology,
                 scale: float = 1.0) -> dict[tuple[str, ...], float]:
    """The seconds of the planner's plan from ``src`` to ``dst`` per link, each collective timed
    as the estimate times its record (``collectives.collective_seconds``), its bytes multiplied
    by ``scale``."""
    plan = plan_reshard(src, dst, shape, np.dtype(dtype))
    out: dict[tuple[str, ...], float] = {}
    for step in plan.steps:
        if step.collective is None:
            continue
        axes = tuple(step.axes) or tuple(src.mesh.axis_names)  # an exchange: priced on the slowest link
        seconds = collective_seconds(topology, step_collectives(step, axes, scale, topology, np.dtype(dtype).itemsize))
        link = symmetry.in_mesh_order(axes, src.mesh)  # a set of axes, whatever the collective's order
        out[link] = out.get(link, 0.0) + seconds
    return out


def all_reduce_minimum(balanced: float, g: int, itemsize: int) -> float:
    """The bytes the busiest member of an all-reduce of ``g`` must receive, as the estimate counts
    them (``collective_cost.analytic_min_bytes``: balanced chunks of whole elements, so the member
    with a chunk of ``ceil(n / g)`` receives ``(g - 1) ceil(n / g) + n - ceil(n / g)`` elements),
    from the planner's ``2 (g - 1) / g`` of the block (``balanced``): they differ where ``g``
    does not divide the block's ``n`` elements (a scalar's sum: 3 elements, not 1.5, on 4)."""
    if g <= 1 or itemsize <= 0:
        return balanced
    n = round(balanced * g / (2 * (g - 1)) / itemsize)
    c = -(-n // g)
    return float(((g - 1) * c + n - c) * itemsize)


def step_collectives(step, axes: tuple[str, ...], scale: float, topology: Topology,
                     itemsize: int = 0) -> list[Collective]:
    """A plan step's collective, one per group whose time may differ, as its busiest member
    runs it: a group's largest bytes, minimum and messages (the direct algorithms': a group's
    ``g - 1`` peers, an exchange's rounds, an all-reduce's reduce-scatter and all-gather; its
    minimum as the estimate counts it, ``all_reduce_minimum``)."""
    if step.round_count:  # a permute or exchange: every device named in a pair, one group (counted, not planned)
        groups, messages = (step.pair_devices,), step.round_count
    else:
        groups = groups_to_time(topology, step.groups)
        messages = max((len(g) - 1 for g in step.groups), default=1)
    if step.kind == "all_reduce":
        messages *= 2
    out = []
    for group in groups:
        sent = max((step.sent.get(d, 0) for d in group), default=0) * scale
        received = max((step.received.get(d, 0) for d in group), default=0) * scale
        minimum = max((step.minimum.get(d, 0) for d in group), default=0) * scale
        if step.kind == "all_reduce":  # direct: a reduce-scatter then an all-gather (collective_cost)
            sent = received = minimum = all_reduce_minimum(minimum / scale, len(group), itemsize) * scale
        out.append(Collective(step.collective, axes, tuple(group), sent, received, messages, minimum))
    return out
