"""How the reshard planner's time grows with the device count (issues 30 and 34): the exchange
path plans one transfer per (receiving device, cell it lacks), so a reshard that moves mesh axes
between several dims at once (``[{y},{x},{}] -> [{},{},{x,y}]``, the kind of reshard
``ss.autoshard``'s strategies contain and hand-written ones lack) plans about N^2 transfers on N
devices and edge-colours them into N-1 rounds (``rounds.edge_colouring``, whose alternating-path
flips grow faster still). Prints CPU seconds (``time.process_time``) per mesh and the phases.

    python benchmarks/reshard_scale.py                 # meshes 8x8, 16x16, 16x32
    python benchmarks/reshard_scale.py --mesh 32x32    # 1,024 devices: minutes
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import simshard as ss
from simshard.partition.reshard import plan_reshard

SHAPE = (2048, 2048, 2048)  # divisible by every mesh below; only index arrays are built


def case(x: int, y: int):
    """The reshard timed: both mesh axes moved from dims 0 and 1 onto dim 2."""
    mesh = ss.Mesh({"x": x, "y": y})
    spec = lambda *dims: ss.Sharding(mesh, tuple(ss.DimSharding(d) for d in dims))
    return spec(("y",), ("x",), ()), spec((), (), ("x", "y"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mesh", action="append", help="XxY (repeatable); default 8x8, 16x16, 16x32")
    ap.add_argument("--rounds-up-to", type=int, default=512,
                    help="also plan the exchange's rounds (what emitting it needs) up to this many devices")
    ap.add_argument("--profile", action="store_true", help="print the top functions by cumulative time")
    args = ap.parse_args()
    for text in args.mesh or ["8x8", "16x16", "16x32"]:
        x, y = (int(n) for n in text.split("x"))
        src, dst = case(x, y)
        prof = cProfile.Profile() if args.profile else None
        t = time.process_time()
        if prof:
            prof.enable()
        plan = plan_reshard(src, dst, SHAPE)
        if prof:
            prof.disable()
        cpu = time.process_time() - t
        priced = f"{x * y:6d} devices: priced in {cpu:8.2f} s CPU ({plan.bytes} B), steps {[s.kind for s in plan.steps]}"
        if x * y <= args.rounds_up_to:
            t = time.process_time()
            rounds = sum(len(s.rounds) for s in plan.steps)
            priced += f", {rounds} rounds planned in {time.process_time() - t:.2f} s CPU"
        print(f"{priced}, paths {dict(plan.alternatives)}", flush=True)
        if prof:
            pstats.Stats(prof).sort_stats("cumtime").print_stats(12)


if __name__ == "__main__":
    main()
