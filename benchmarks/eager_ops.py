"""Eager ops on committed arrays: the first call of an op (trace, type or propagate, partition,
load) against the next calls of the same op on arrays of the same types (the compiled op reused),
on the local backend; JAX's arrays (``ss.device_put``) and DTensors alike.

    python benchmarks/eager_ops.py [--reps 20] [--size 256]

Prints one row per op: milliseconds of its first call and the median of the next ``reps``. A
benchmark, not a test: these machines are shared, so read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import simshard as ss
from simshard import AxisType, NamedSharding, P
from simshard.dtensor import Shard, distribute_tensor, init_device_mesh


def ops(size: int) -> dict:
    """Each op as a function of no arguments, on fresh arrays of ``size`` x ``size`` float32."""
    mesh = ss.make_mesh((2, 4), ("X", "Y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    x = np.ones((size, size), np.float32)
    a = ss.device_put(x, NamedSharding(mesh, P("X", None)))
    b = ss.device_put(x, NamedSharding(mesh, P(None, "Y")))
    tp = init_device_mesh("cpu", (8,), mesh_dim_names=("tp",))
    d, w = distribute_tensor(x, tp, [Shard(1)]), distribute_tensor(x, tp, [Shard(0)])
    return {
        "jax a + b": lambda: a + b,
        "jax a @ b": lambda: a @ b,
        "jax reshard": lambda: ss.reshard(a, P(None, "X")),
        "dtensor d @ w (Partial)": lambda: d @ w,
        "dtensor d.sum()": lambda: d.sum(),
    }


def time_op(fn, reps: int) -> tuple[float, float]:
    """Milliseconds of the first call and the median of the next ``reps``."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    rest = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        rest.append(time.perf_counter() - t0)
    return first * 1e3, statistics.median(rest) * 1e3


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--size", type=int, default=256)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'op':28s} {'first ms':>10s} {'again ms':>10s}")
    for name, fn in ops(args.size).items():
        first, again = time_op(fn, args.reps)
        rows.append({"op": name, "first_ms": first, "again_ms": again})
        print(f"{name:28s} {first:10.1f} {again:10.1f}")
    return rows


if __name__ == "__main__":
    main()
