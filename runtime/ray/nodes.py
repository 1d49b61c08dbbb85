"""Mesh axes to cluster nodes: which devices share a machine, as a Ray placement group.

``node_plan(mesh, node_axes=("host",))`` is pure planning (no Ray, no actors): devices that share
every coordinate along ``node_axes`` share a node, so those axes cross nodes and every other axis
stays inside one node. A mesh ``{"host": 2, "x": 4}`` with ``node_axes=("host",)`` puts devices
0-3 on node 0 and 4-7 on node 1: collectives over ``x`` stay on a machine, collectives over
``host`` cross the network.

The plan holds one placement-group bundle per node (the per-device resources summed), the
strategy (``STRICT_SPREAD``: every bundle on a different node) and each device's bundle index.
``placement_group_for(plan)`` creates the group on the connected Ray cluster (Ray is imported only
there) and ``actor_options(plan, pg, device)`` gives the ``.options(...)`` that pins a device's
actor to its bundle. ``device_nodes(plan, pg)`` reads back which Ray node each device landed on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from simshard.errors import ShardingError
from simshard.sharding.mesh import Mesh

STRATEGIES = ("STRICT_SPREAD", "SPREAD", "PACK", "STRICT_PACK")

# Ray keeps resource quantities to 1e-4; sums of fractions (0.1 * 8) are rounded to that grid.
_RESOLUTION = 4


class PlacementError(RuntimeError):
    """The cluster cannot hold a NodePlan: too few nodes, too little CPU, or the placement group
    did not become ready in time."""


@dataclass(frozen=True)
class NodePlan:
    """Devices of a mesh grouped onto nodes, and the Ray placement group that reserves them.

    ``nodes[i]`` lists the devices of node ``i`` (mesh order); ``node_of[d]`` is device ``d``'s
    node, which is also its bundle index in ``bundles`` (one bundle per node). ``node_coords[i]``
    is node ``i``'s coordinate along ``node_axes``."""

    mesh: Mesh
    node_axes: tuple[str, ...]
    cpus_per_device: float
    resources_per_device: Mapping[str, float]
    strategy: str
    nodes: tuple[tuple[int, ...], ...]
    node_coords: tuple[tuple[int, ...], ...]
    node_of: Mapping[int, int] = field(repr=False)
    bundles: tuple[dict[str, float], ...] = field(repr=False)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def devices_per_node(self) -> int:
        return len(self.nodes[0])

    @property
    def cpus_per_node(self) -> float:
        return self.bundles[0].get("CPU", 0.0)

    def bundle_index(self, device: int) -> int:
        """The placement-group bundle (= node index) that holds ``device``'s actor."""
        try:
            return self.node_of[device]
        except KeyError:
            raise ShardingError("unknown-device", f"device {device} is not in mesh @{self.mesh.name}") from None

    def same_node(self, a: int, b: int) -> bool:
        return self.bundle_index(a) == self.bundle_index(b)

    def describe(self) -> str:
        """One line per node: ``node 0 (host=0): devices 0, 1, 2, 3 [CPU 1.0]``."""
        lines = []
        for i, (devs, nc) in enumerate(zip(self.nodes, self.node_coords)):
            where = ", ".join(f"{a}={c}" for a, c in zip(self.node_axes, nc)) or "whole mesh"
            res = ", ".join(f"{k} {v:g}" for k, v in self.bundles[i].items())
            lines.append(f"node {i} ({where}): devices {', '.join(map(str, devs))} [{res}]")
        return "\n".join(lines)


def _quantity(what: str, value: float) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ShardingError("invalid-resources", f"{what} must be a finite number >= 0, got {value!r}")
    if v > 1 and v != int(v):
        # Ray's rule for a task or actor request: fractions only below 1.
        raise ShardingError(
            "invalid-resources", f"{what} is {v:g}; Ray accepts fractional amounts only below 1 (use a whole number)"
        )
    return v


def node_plan(
    mesh: Mesh,
    node_axes: Sequence[str] | str = ("host",),
    cpus_per_device: float = 1.0,
    *,
    cpus_per_node: float | None = None,
    resources_per_device: Mapping[str, float] | None = None,
    strategy: str = "STRICT_SPREAD",
) -> NodePlan:
    """Map each device of ``mesh`` to a node: devices sharing all coordinates of ``node_axes``
    share a node. Nodes are numbered row-major over ``node_axes`` in mesh order.

    ``cpus_per_device`` (and ``resources_per_device``, e.g. ``{"memory": 2**30}``) is what each
    device actor asks for; a node's bundle asks for the sum over its devices. With
    ``cpus_per_node`` (the CPUs one machine offers), a node that would need more is refused.
    ``node_axes=()`` puts the whole mesh on one node. ``strategy`` is the placement-group strategy
    (``STRICT_SPREAD`` by default: each node's bundle on a different machine; ``PACK`` lets a
    one-machine cluster stand in for several nodes).
    """
    axes = _checked_axes(mesh, node_axes, strategy)
    cpus, extra = _checked_resources(cpus_per_device, resources_per_device)
    # Node axes in mesh order: node index is row-major over them.
    ordered = tuple(a for a in mesh.axis_names if a in axes)
    node_of, members, coords_of_node = _nodes(mesh, ordered)
    per_node = mesh.size // len(members)
    bundle = _bundle(mesh, ordered, per_node, cpus, extra, cpus_per_node)
    num_nodes = len(members)
    return NodePlan(
        mesh=mesh,
        node_axes=ordered,
        cpus_per_device=cpus,
        resources_per_device=extra,
        strategy=strategy,
        nodes=tuple(tuple(m) for m in members),
        node_coords=tuple(coords_of_node),
        node_of=node_of,
        bundles=tuple(dict(bundle) for _ in range(num_nodes)),
    )


def _checked_axes(mesh: Mesh, node_axes: Sequence[str] | str, strategy: str) -> tuple[str, ...]:
    """``node_axes`` as a tuple of the mesh's axes, each once; a ``ShardingError`` otherwise (and
    for a placement strategy Ray does not know)."""
    if isinstance(node_axes, str):
        node_axes = (node_axes,)
    axes = tuple(str(a) for a in node_axes)
    for a in axes:
        if a not in mesh.axis_names:
            raise ShardingError(
                "unknown-axis",
                f'node_axes names axis "{a}", which is not in mesh @{mesh.name} (axes: {", ".join(mesh.axis_names)})',
                axis=a,
            )
    dup = [a for a in axes if axes.count(a) > 1]
    if dup:
        raise ShardingError("duplicate-axis", f'axis "{dup[0]}" appears twice in node_axes {axes}', axis=dup[0])
    if strategy not in STRATEGIES:
        raise ShardingError("invalid-strategy", f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return axes


def _checked_resources(cpus_per_device: float, resources_per_device) -> tuple[float, dict[str, float]]:
    """Each device's CPUs and other resources, checked: some resource, and CPUs not among the others."""
    cpus = _quantity("cpus_per_device", cpus_per_device)
    extra = {str(k): _quantity(f"resources_per_device[{k!r}]", v) for k, v in (resources_per_device or {}).items()}
    if "CPU" in extra:
        raise ShardingError("invalid-resources", "give CPUs as cpus_per_device, not in resources_per_device")
    if cpus == 0 and not any(extra.values()):
        raise ShardingError(
            "invalid-resources", "each device must ask for some resource (cpus_per_device > 0): "
            "Ray refuses placement-group bundles of zero resources"
        )
    return cpus, extra


def _nodes(mesh: Mesh, ordered: tuple[str, ...]):
    """(device -> node, each node's devices, each node's coordinates over ``ordered``): nodes
    numbered row-major over the node axes in mesh order."""
    pos = [mesh.axis_names.index(a) for a in ordered]
    sizes = [mesh.axis_sizes[p] for p in pos]
    num_nodes = math.prod(sizes)
    node_of: dict[int, int] = {}
    members: list[list[int]] = [[] for _ in range(num_nodes)]
    for flat in range(mesh.size):
        d = mesh.device_ids[flat]
        c = mesh.coords(d)
        n = 0
        for p, s in zip(pos, sizes):
            n = n * s + c[p]
        node_of[d] = n
        members[n].append(d)
    coords_of_node = []
    for n in range(num_nodes):
        cs, rest = [], n
        for s in reversed(sizes):
            cs.append(rest % s)
            rest //= s
        coords_of_node.append(tuple(reversed(cs)))
    return node_of, members, coords_of_node


def _bundle(mesh: Mesh, ordered, per_node: int, cpus: float, extra: Mapping[str, float],
            cpus_per_node: float | None) -> dict[str, float]:
    """What one node's placement-group bundle asks for: its devices' resources summed; refused
    when a node offers fewer CPUs (``cpus_per_node``)."""
    bundle: dict[str, float] = {}
    if cpus:
        bundle["CPU"] = round(cpus * per_node, _RESOLUTION)
    for k, v in extra.items():
        if v:
            bundle[k] = round(v * per_node, _RESOLUTION)
    if cpus_per_node is not None and bundle.get("CPU", 0.0) > float(cpus_per_node) + 10**-_RESOLUTION:
        raise ShardingError(
            "node-too-small",
            f"each node holds {per_node} devices of mesh @{mesh.name} (node_axes {ordered or '()'}) "
            f"and needs {per_node} x {cpus:g} = {bundle['CPU']:g} CPUs, but a node has {float(cpus_per_node):g}; "
            "lower cpus_per_device (fractions are fine), or put more mesh axes in node_axes to spread over more nodes",
        )
    return bundle


def check_fits(plan: NodePlan, node_resources: Sequence[Mapping[str, float]]) -> None:
    """Refuse, with a clear message, a plan the cluster cannot hold (pure: give each alive node's
    total resources, as in ``ray.nodes()[i]["Resources"]``). Only the spread strategies need a
    distinct node per bundle; every bundle is the same size, so counting nodes that fit suffices."""
    need = plan.bundles[0]
    fitting = [r for r in node_resources if all(float(r.get(k, 0.0)) + 1e-9 >= v for k, v in need.items())]
    have = ", ".join(f"{float(r.get('CPU', 0)):g}" for r in node_resources) or "none"
    if plan.strategy in ("STRICT_SPREAD",) and len(fitting) < plan.num_nodes:
        raise PlacementError(
            f"the plan needs {plan.num_nodes} nodes with {need} each (node_axes {plan.node_axes}, "
            f"{plan.devices_per_node} devices per node), but the cluster has {len(node_resources)} alive nodes "
            f"(CPUs: {have}) of which {len(fitting)} fit; add nodes, lower cpus_per_device, "
            "or use strategy='PACK' to stand several nodes in for one machine"
        )
    if plan.strategy == "STRICT_PACK":
        total = {k: v * plan.num_nodes for k, v in need.items()}
        if not any(all(float(r.get(k, 0.0)) + 1e-9 >= v for k, v in total.items()) for r in node_resources):
            raise PlacementError(f"STRICT_PACK needs one node with {total}; cluster node CPUs: {have}")
    if not fitting:
        raise PlacementError(f"no node of the cluster (CPUs: {have}) can hold one bundle {need}")


def placement_group_for(plan: NodePlan, *, timeout: float = 60.0, name: str = "", check: bool = True):
    """Create the plan's placement group on the connected Ray cluster and wait until it is ready.

    Ray must be initialised (``ray.init(address=...)``). With ``check``, a cluster that is too
    small is refused at once (``PlacementError``) instead of waiting forever; a group not ready
    after ``timeout`` seconds is removed and refused too."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    if not ray.is_initialized():
        raise PlacementError("Ray is not initialised: call ray.init(address=...) before placement_group_for")
    if check:
        check_fits(plan, [n["Resources"] for n in ray.nodes() if n.get("Alive")])
    pg = placement_group([dict(b) for b in plan.bundles], strategy=plan.strategy, name=name)
    try:
        ray.get(pg.ready(), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(pg)
        raise PlacementError(
            f"placement group of {plan.num_nodes} bundles {plan.bundles[0]} ({plan.strategy}) "
            f"not ready after {timeout:g} s; the cluster is busy or too small"
        ) from None
    return pg


def actor_options(plan: NodePlan, pg, device: int) -> dict[str, Any]:
    """``ActorClass.options(**actor_options(plan, pg, d))``: device ``d``'s resources, pinned to
    its node's bundle."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts: dict[str, Any] = {
        "num_cpus": plan.cpus_per_device,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=pg,
            placement_group_bundle_index=plan.bundle_index(device),
            placement_group_capture_child_tasks=True,
        ),
    }
    extra = {k: v for k, v in plan.resources_per_device.items() if v}
    if "memory" in extra:
        opts["memory"] = extra.pop("memory")
    if extra:
        opts["resources"] = extra
    return opts


def bundle_nodes(pg) -> dict[int, str]:
    """Bundle index to the Ray node id it was placed on (the group must be ready)."""
    from ray.util.placement_group import placement_group_table

    table = placement_group_table(pg)
    return {int(b): str(n) for b, n in table["bundles_to_node_id"].items()}


def device_nodes(plan: NodePlan, pg) -> dict[int, str]:
    """Each device to the Ray node id its bundle sits on: to check that transfers crossed nodes."""
    where = bundle_nodes(pg)
    return {d: where[n] for d, n in plan.node_of.items()}


def remove(pg) -> None:
    """Release a placement group (its actors must be gone or will be killed)."""
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(pg)
