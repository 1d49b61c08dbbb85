"""How device processes are sized: how many devices share one, and which (consecutive devices of
the mesh's order), and the CPU share each device asks Ray for."""

from __future__ import annotations

from ...wire.polling import cores
from ..nodes import node_plan
from ..start import ACTOR_CPUS_MAX


def auto_per_process(n: int, cpus: int | None = None) -> int:
    """Devices per process on a local Ray when not given: the fewest that keep the processes
    within the machine's ``cpus`` (the smallest count dividing ``n`` with ``n / k <= cpus``), so
    that each device process has a core of its own (it polls for its messages instead of
    sleeping: ``wire/polling.should_spin``). Where the processes would outnumber the cores, the
    devices' work is serialised on the cores all the same, and a process per device only adds
    wakeups, context switches and worker starts (64 processes take ~25 s to start on 2 cores);
    a process's devices still compute at once, a kernel thread each (``core/kernel_threads.py``).
    Measured with benchmarks/peers.py: 8 devices on 2 cores, the Megatron MLP 128x256x1024 step
    took 5.2 ms with 4 devices per process against 12.1 ms with 1 (docs/performance.md); on 16
    cores, 2.2 ms with 1 against 8.1 ms with 4 (issue 33's table)."""
    bound = max(1, cpus or cores())
    return next(k for k in range(1, n + 1) if n % k == 0 and n // k <= bound)


def process_groups(devices: tuple[int, ...], per: int) -> tuple[tuple[int, ...], ...]:
    """The devices in groups of ``per`` consecutive ones in the mesh's device order, one group per
    host process: devices that differ only in the minor mesh axes share a process, as a node's
    accelerators share a host (so messages along those axes stay in the process)."""
    if not isinstance(per, int) or isinstance(per, bool) or per < 1:
        raise ValueError(f"RayMesh: devices_per_process must be a positive int, not {per!r}")
    if len(devices) % per:
        raise ValueError(f"RayMesh: devices_per_process={per} does not divide the {len(devices)} devices")
    return tuple(devices[i:i + per] for i in range(0, len(devices), per))


def default_actor_cpus(ray, mesh, n_devices: int, node_axes, node_strategy: str) -> float:
    """Each device's CPU share when not given: half the CPUs the devices will run on, shared out,
    at most ``ACTOR_CPUS_MAX`` each (rounded down to Ray's 1e-4 grid). Without ``node_axes`` the
    whole cluster's CPUs count; with it, those of the ``k``-th largest node for ``k`` nodes, over
    its devices."""
    if node_axes is None:
        total, per = float(ray.cluster_resources().get("CPU", 1.0)), n_devices
    else:
        shape = node_plan(mesh, node_axes, cpus_per_device=1.0, strategy=node_strategy)
        per = shape.devices_per_node
        node_cpus = sorted((float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")),
                           reverse=True)
        if node_strategy in ("SPREAD", "PACK", "STRICT_PACK"):
            total = sum(node_cpus) / shape.num_nodes  # bundles may share a node
        else:
            # too few nodes: keep the fraction small, placement_group_for refuses the plan clearly
            total = node_cpus[shape.num_nodes - 1] if len(node_cpus) >= shape.num_nodes else 1.0
    return max(1e-4, min(ACTOR_CPUS_MAX, int(max(total, 0.0) / (2 * per) * 1e4) / 1e4))  # Ray's finest grid
