"""Several Ray nodes on one machine: a stand-in cluster for trying node_axes without machines.

    python cluster/launch_local.py --nodes 2 --cpus 2

starts a head node and ``nodes - 1`` worker nodes (each its own raylet and object store, as on
separate machines, so objects between them really cross node boundaries), prints the address
to connect to, and keeps them up until Ctrl-C or SIGTERM, then shuts every node down. Connect
from another shell with ``RAY_ADDRESS=<address>`` or ``ray.init(address="<address>")`` /
``ss.run(..., backend="ray", address="<address>")``.

From Python (tests do this)::

    from launch_local import start_local_cluster
    with start_local_cluster(nodes=2, cpus=1) as cluster:
        ray.init(address=cluster.address)
        ...

It uses ``ray.cluster_utils.Cluster``, Ray's own multi-node-on-one-machine harness. Every node
binds this machine's address (Ray picks it); nothing here opens the machine to other hosts beyond
what ``ray start`` itself does, so run it on a trusted network only.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time


class LocalCluster:
    """A running local multi-node Ray cluster; ``shutdown()`` (or leaving ``with``) stops it."""

    def __init__(self, nodes: int, cpus: float, *, object_store_memory: int | None, timeout: float,
                 dashboard: bool = False):
        if nodes < 1:
            raise ValueError(f"--nodes must be >= 1, got {nodes}")
        if cpus <= 0:
            raise ValueError(f"--cpus must be > 0, got {cpus}")
        from ray.cluster_utils import Cluster

        node_args = {"num_cpus": cpus}
        if object_store_memory:
            node_args["object_store_memory"] = int(object_store_memory)
        self.nodes = nodes
        self.cpus = cpus
        self._cluster = Cluster(
            initialize_head=True,
            head_node_args={**node_args, "include_dashboard": dashboard},
        )
        try:
            for _ in range(nodes - 1):
                self._cluster.add_node(**node_args)
            self._cluster.wait_for_nodes(timeout=timeout)
        except BaseException:
            self._cluster.shutdown()
            raise

    @property
    def address(self) -> str:
        """``host:port`` of the head's GCS: pass to ``ray.init(address=...)`` or ``RAY_ADDRESS``."""
        return self._cluster.address

    def shutdown(self) -> None:
        """Disconnect this process if it is connected, then stop every node (idempotent)."""
        if self._cluster is None:
            return
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        finally:
            self._cluster.shutdown()
            self._cluster = None

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def start_local_cluster(nodes: int = 2, cpus: float = 1, *, object_store_memory: int | None = 100 * 2**20,
                        timeout: float = 60.0) -> LocalCluster:
    """Start ``nodes`` Ray nodes on this machine, each offering ``cpus`` CPUs (a fraction-free
    count; device actors ask for fractions of it). Returns once every node has registered, or
    raises (having stopped what it started) after ``timeout`` seconds."""
    return LocalCluster(nodes, cpus, object_store_memory=object_store_memory, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2, help="number of Ray nodes, head included (default 2)")
    p.add_argument("--cpus", type=float, default=1, help="CPUs each node offers (default 1)")
    p.add_argument("--object-store-mb", type=int, default=100, help="object store per node, MiB (default 100)")
    p.add_argument("--timeout", type=float, default=60, help="seconds to wait for the nodes (default 60)")
    p.add_argument("--check", action="store_true", help="connect, print the nodes, shut down, exit")
    args = p.parse_args(argv)

    t0 = time.monotonic()
    cluster = start_local_cluster(args.nodes, args.cpus, object_store_memory=args.object_store_mb * 2**20,
                                  timeout=args.timeout)
    stop = threading.Event()
    try:
        print(f"{args.nodes} Ray nodes x {args.cpus:g} CPUs up in {time.monotonic() - t0:.1f} s", flush=True)
        print(f"address: {cluster.address}", flush=True)
        print(f"connect: RAY_ADDRESS={cluster.address}  (or ray.init(address={cluster.address!r}))", flush=True)
        if args.check:
            import ray

            ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
            alive = [n for n in ray.nodes() if n.get("Alive")]
            for n in alive:
                print(f"node {n['NodeID'][:12]} {n['NodeManagerAddress']} CPU={n['Resources'].get('CPU', 0):g}")
            return 0 if len(alive) == args.nodes else 1
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        print("Ctrl-C (or SIGTERM) stops every node.", flush=True)
        while not stop.wait(0.5):
            pass
        return 0
    finally:
        cluster.shutdown()
        print("all nodes stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
