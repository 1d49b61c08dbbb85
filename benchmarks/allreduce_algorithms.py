"""The all-reduce's algorithms against each other by size, on the Ray backend (one process per
device, sockets data plane): where one-shot would pay for small buffers. It is not the default:
a run's records count what moved, and the reports hold them to XLA's, DTensor's and the
published volumes, which direct's analytic minimum matches (docs/performance.md).

``direct`` takes two steps (a reduce-scatter, then an all-gather) and moves the analytic minimum;
``oneshot`` takes one step and moves ``g - 1`` whole buffers into each member. Where a step's
latency outweighs the extra bytes, one-shot wins; the size where the two cross is the threshold.
Each figure is the steady-state time of one all-reduce on the devices' own clocks, the best of
three runs of ``--reps`` back-to-back copies.

    python benchmarks/allreduce_algorithms.py [--groups 4,8] [--sizes 16,64,256,1024]   # KiB
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from collective_programs import collective_program, collective_seconds  # noqa: E402


def sweep(groups, sizes_kib, algorithms, reps: int) -> list[str]:
    """One line per (group size, buffer size): each algorithm's time."""
    from simshard.runtime.ray.driver.mesh import RayMesh

    lines = []
    for g in groups:
        ids = tuple(range(g))
        with RayMesh(devices=ids, devices_per_process=1) as rm:
            for kib in sizes_kib:
                cols = 256
                rows = max(1, kib * 1024 // (4 * cols))
                inputs = {d: [np.random.default_rng(d).standard_normal((rows, cols)).astype(np.float32)] for d in ids}
                spmd = collective_program("all_reduce", ids, rows, cols, reps)
                got = {}
                for algorithm in algorithms:
                    key = rm.load(spmd, timeout=120.0, algorithm=algorithm)
                    rm.execute(key, spmd, inputs)
                    got[algorithm] = min(collective_seconds(rm.execute(key, spmd, inputs), reps) for _ in range(3))
                    rm.unload(key)
                lines.append(f"all-reduce over {g} devices, {kib} KiB a buffer: "
                             + ", ".join(f"{a} {t * 1e6:.0f} us" for a, t in got.items()))
                print(lines[-1], flush=True)
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default="4,8")
    ap.add_argument("--sizes", default="4,16,64,128,256,1024", help="KiB per member's buffer")
    ap.add_argument("--algorithms", default="direct,oneshot")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args(argv)
    print(f"{os.cpu_count()} cores", flush=True)
    sweep([int(g) for g in a.groups.split(",")], [int(s) for s in a.sizes.split(",")], a.algorithms.split(","), a.reps)


if __name__ == "__main__":
    main()
