"""Topologies of real clusters, by name, for a training run's axes (``tp``, ``dp``, ``pp``).

* ``dgx-a100``: 8 A100 SXM 80 GB a node on NVSwitch, NVLink 3: 600 GB/s per GPU both directions
  together, 300 GB/s each way (NVIDIA A100 data sheet); between nodes 8 HDR InfiniBand adapters,
  one a GPU: 200 Gb/s, 25 GB/s each way (NVIDIA DGX A100 user guide; Selene, the cluster of
  Narayanan et al.'s runs, is built of them);
* ``dgx-h100``: 8 H100 SXM a node, NVLink 4: 900 GB/s per GPU, 450 GB/s each way (H100 data
  sheet); 8 NDR adapters, 400 Gb/s, 50 GB/s each way (DGX H100 user guide).

NVLink runs at what NCCL's ring all-reduce reaches of it: 81%, 365.6 GB/s bus bandwidth of
NVLink 4's 450 on 8 H200s (S. Bekman, ML Engineering, network/benchmarks/README.md, 8 GiB
all-reduce, NVLS off), the same fraction taken for NVLink 3; InfiniBand at its line rate (no
published achieved fraction at hand: an optimistic figure). Per-message latencies are those of
``report/topology.py``'s link classes (1 us on NVLink, 5 us over InfiniBand). Devices are numbered tensor parallel first, so a node holds 8 consecutive
devices; ``nodes`` gives how many devices a node holds when it is not 8.
"""

from __future__ import annotations

from ..topology import Link, Nodes, Topology

NVLINK_EFFICIENCY = 365.6 / 450  # NCCL ring all-reduce bus bandwidth over NVLink 4's rate (above)
CLUSTERS = {
    "dgx-a100": (Link(300e9 * NVLINK_EFFICIENCY, 1e-6), Link(25e9, 5e-6), "a100", 8),
    "dgx-h100": (Link(450e9 * NVLINK_EFFICIENCY, 1e-6), Link(50e9, 5e-6), "h100", 8),
}


def cluster(name: str, per_node: int | None = None, device=None) -> Topology:
    """The ``name`` cluster's topology: ``tp`` on the node's link, ``dp`` and ``pp`` on the
    network, ``per_node`` devices to a node (default the cluster's 8)."""
    try:
        intra, inter, dev, size = CLUSTERS[name]
    except KeyError:
        raise ValueError(f"unknown cluster {name!r} (known: {', '.join(CLUSTERS)})") from None
    return Topology({"tp": intra, "dp": inter, "pp": inter}, inter, Nodes(per_node or size, inter),
                    device if device is not None else dev)


__all__ = ["CLUSTERS", "cluster"]
