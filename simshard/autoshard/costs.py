"""Seconds the search weighs: an op's compute under a strategy, and moving a value between two
layouts.

* Compute: the op's FLOPs and bytes on the local blocks the strategy gives it
  (``report.compute.op_flops``), on the device's roofline (``DeviceSpec.seconds``): the same
  model the estimate applies to a schedule, so the two agree op for op.
* A reshard: the reshard planner's plan (``partition.plan_reshard``, the exact steps a run would
  take, pending reductions included), each collective step priced by the alpha-beta model of
  ``report.topology``: the busiest device's bytes over the link of the step's axes, plus one
  latency per message (a group's ``g - 1`` peers, or an exchange's rounds); an all-reduce as the
  direct algorithm runs it (``report.collective_cost``): ``2(g-1)/g`` of the buffer in
  ``2(g-1)`` messages. Nodes
  (``Topology.nodes``) are not modelled here: the plan is priced flat on the axes' links.

Plans are cached per pair of layouts and shape for one search, and planned on a small shape of
the same divisibility (``ReshardCosts``).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.program import Aval, Eqn
from ..partition import plan_reshard
from ..report.compute import DeviceSpec, op_flops
from ..report.topology import Topology
from ..sharding.dims import Sharding
from .candidates import OpCandidate, local_bytes
from .closed_form import closed_form_seconds

LAYOUT_FREE = ("scan",)  # structured ops priced through their bodies


def local_shape(s: Sharding, shape) -> tuple[int, ...]:
    return tuple(-(-n // s.shard_count(d)) for d, n in enumerate(shape))


def compute_seconds(eqn: Eqn, cand: OpCandidate, device: DeviceSpec) -> float:
    """One device's time running ``eqn`` as ``cand`` lays it out (the roofline of its local op)."""
    if eqn.op in LAYOUT_FREE:
        return 0.0
    ins = [local_shape(s, x.aval.shape) for s, x in zip(cand.operands, eqn.inputs)]
    outs = [local_shape(s, v.aval.shape) for s, v in zip(cand.results, eqn.outputs)]
    flops = op_flops(eqn.op, ins, outs, eqn.kw)
    nbytes = sum(local_bytes(s, x.aval) for s, x in zip(cand.operands, eqn.inputs))
    nbytes += sum(local_bytes(s, v.aval) for s, v in zip(cand.results, eqn.outputs))
    return device.seconds(flops, nbytes)


class ReshardCosts:
    """Seconds to move a value between two layouts under ``topology``, per mesh-axis link.

    Even layouts move bytes in proportion to the tensor's size, so a pair is planned once on the
    smallest shape with the same divisibility by the mesh (each dim ``gcd(n, devices)``) and its
    bytes scaled up (``plan_seconds``); pairs are cached by the layouts' identity (``intern``
    gives each distinct layout one object). ``planner=False`` prices a pair by the planner's
    structured path in closed form instead (``closed_form``), for searches over many devices."""

    def __init__(self, topology: Topology, mesh_size: int, planner: bool = True):
        self.topology, self.mesh_size, self.planner = topology, mesh_size, planner
        self.cache: dict = {}
        self.canonical: dict[Sharding, Sharding] = {}

    def intern(self, s: Sharding) -> Sharding:
        return self.canonical.setdefault(s, s)

    def by_link(self, src: Sharding, dst: Sharding, aval: Aval) -> dict[tuple[str, ...], float]:
        """Seconds per set of mesh axes the plan's collectives run over."""
        if src is dst or src == dst:
            return {}
        key = (id(src), id(dst), aval.shape, aval.dtype.itemsize)
        hit = self.cache.get(key)
        if hit is None and not self.planner:
            hit = self.cache[key] = closed_form_seconds(src, dst, local_bytes(src, aval), self.topology)
        if hit is None:
            small = tuple(math.gcd(n, self.mesh_size) for n in aval.shape)
            scale = math.prod(aval.shape) / max(math.prod(small), 1)
            hit = self.cache[key] = plan_seconds(src, dst, small, aval.dtype, self.topology, scale)
        return hit

    def seconds(self, src: Sharding, dst: Sharding, aval: Aval) -> float:
        return sum(self.by_link(src, dst, aval).values())


def plan_seconds(src: Sharding, dst: Sharding, shape, dtype, topology: Topology,
                 scale: float = 1.0) -> dict[tuple[str, ...], float]:
    """The alpha-beta seconds of the planner's plan from ``src`` to ``dst`` per link (module
    docstring), its bytes multiplied by ``scale``."""
    plan = plan_reshard(src, dst, shape, np.dtype(dtype))
    out: dict[tuple[str, ...], float] = {}
    for step in plan.steps:
        if step.collective is None:
            continue
        axes = tuple(step.axes) or tuple(src.mesh.axis_names)  # an exchange: priced on the slowest link
        link = topology.link(axes)
        busiest = max(max(step.received.values(), default=0), max(step.sent.values(), default=0))
        messages = len(step.rounds) if step.rounds else max((len(g) - 1 for g in step.groups), default=1)
        if step.kind == "all_reduce":  # direct: a reduce-scatter then an all-gather (collective_cost)
            busiest, messages = max(step.minimum.values(), default=0), 2 * messages
        out[axes] = out.get(axes, 0.0) + busiest * scale / link.bandwidth + link.latency * messages
    return out
