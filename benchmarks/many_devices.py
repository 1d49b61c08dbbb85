"""How many logical devices one machine runs: the Megatron MLP on an n-device mesh (as square as
n allows), ``devices_per_process`` devices in each Ray worker process, verified bitwise.

    python benchmarks/many_devices.py --devices 4096 --per-process 512
    python benchmarks/many_devices.py --devices 4096 --per-process 512 --nodes 2 --timeout 120

Prints the wall time of ``ss.run`` (start the processes, trace, propagate, partition, ship, run,
verify) and whether the outputs are bitwise numpy's. ``--nodes N`` starts a local N-node Ray
cluster (``cluster/launch_local.py``: a raylet and object store per node) and puts a ``host``
axis of N first, the MLP's hidden dim split over ``(host, y)``: its all-reduce crosses the nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from pathlib import Path

import numpy as np

import simshard as ss
from simshard import P


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=4096)
    ap.add_argument("--per-process", type=int, default=512)
    ap.add_argument("--backend", default="ray", choices=("ray", "local"))
    ap.add_argument("--nodes", type=int, default=1, help="a local cluster of this many Ray nodes (ray backend)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a device waits for one message")
    args = ap.parse_args(argv)
    h = args.nodes
    n = args.devices // h
    y = 2 ** (int(math.log2(n)) // 2) if n & (n - 1) == 0 else 1
    mesh = ss.Mesh({"host": h, "x": n // y, "y": y})
    xs = ss.exact_inputs([(2 * (n // y), 16), (16, 2 * h * y), (2 * h * y, 16)], seed=0)
    shardings = (P("x", None), P(None, ("host", "y")), P(("host", "y"), None))
    with contextlib.ExitStack() as stack:
        options = {"timeout": args.timeout}
        if args.backend == "ray":
            options["devices_per_process"] = args.per_process
        if h > 1:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
            from launch_local import start_local_cluster  # cluster/ is on the path only from the line above

            cluster = stack.enter_context(start_local_cluster(nodes=h, cpus=1))
            options.update(address=cluster.address, node_axes=("host",))
        t = time.perf_counter()
        res = ss.run(mlp, *xs, mesh=mesh, in_shardings=shardings, backend=args.backend, **options)
        total = time.perf_counter() - t
    print(f"{h * n} devices ({h}x{n // y}x{y}, {h} node{'s' if h > 1 else ''}), "
          f"{args.per_process if args.backend == 'ray' else h * n} per process: {total:.1f} s, bitwise {res.verify.bitwise}")


if __name__ == "__main__":
    main()
