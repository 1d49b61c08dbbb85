"""How many logical devices one machine runs: the Megatron MLP on an n-device mesh (as square as
n allows), ``devices_per_process`` devices in each Ray worker process, verified bitwise.

    python benchmarks/many_devices.py --devices 4096 --per-process 512

Prints the wall time of ``ss.run`` (start the processes, trace, propagate, partition, ship, run,
verify) and whether the outputs are bitwise numpy's.
"""

from __future__ import annotations

import argparse
import math
import time

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
    args = ap.parse_args(argv)
    n = args.devices
    y = 2 ** (int(math.log2(n)) // 2) if n & (n - 1) == 0 else 1
    mesh = ss.Mesh({"x": n // y, "y": y})
    xs = ss.exact_inputs([(2 * (n // y), 16), (16, 2 * y), (2 * y, 16)], seed=0)
    options = {"devices_per_process": args.per_process} if args.backend == "ray" else {}
    t = time.perf_counter()
    res = ss.run(mlp, *xs, mesh=mesh, in_shardings=(P("x", None), P(None, "y"), P("y", None)),
                 backend=args.backend, **options)
    total = time.perf_counter() - t
    print(f"{n} devices ({n // y}x{y}), {args.per_process if args.backend == 'ray' else n} per process: "
          f"{total:.1f} s, bitwise {res.verify.bitwise}")


if __name__ == "__main__":
    main()
