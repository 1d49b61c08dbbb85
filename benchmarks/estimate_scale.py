"""How long ``ss.estimate`` takes on large meshes, and what it says: training steps (SGD) of the
library's programs at real shapes, per strategy and mesh.

    python benchmarks/estimate_scale.py                       # the default cases below
    python benchmarks/estimate_scale.py --case gpt2-small:dp:32x32

A case is ``PROGRAM:STRATEGY:XxY``, PROGRAM a library program or ``gpt2-small`` / ``7b`` (the
``gpt`` program's configurations). Prints seconds, bytes received per device and the largest
peak memory per device.
"""

from __future__ import annotations

import argparse
import time

from simshard import programs
from simshard.programs import gpt
from simshard.units import fmt_bytes

CASES = ("mlp:megatron:64x128", "mlp:fsdp:64x128", "gpt2-small:dp:32x32", "gpt2-small:fsdp:32x32")


def load(name: str):
    return gpt.program(name) if name in gpt.CONFIGS else programs.load(name)


def run_case(case: str) -> dict:
    name, strategy, mesh = case.split(":")
    x, y = (int(n) for n in mesh.split("x"))
    prog = load(name)
    start = time.perf_counter()
    est = prog.estimate(strategy, mesh={"x": x, "y": y}, mode="sgd")
    seconds = time.perf_counter() - start
    devices = x * y
    return {"case": case, "devices": devices, "seconds": seconds,
            "received_per_device": est.comm.total_received / devices, "max_peak": est.memory.max_peak}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help="PROGRAM:STRATEGY:XxY (repeatable; default: a set of cases)")
    args = ap.parse_args(argv)
    print("| case | devices | estimate took | received per device | peak memory per device |")
    print("|---|---|---|---|---|")
    for case in args.case or CASES:
        r = run_case(case)
        print(f"| {r['case']} | {r['devices']:,} | {r['seconds']:.1f} s | {fmt_bytes(r['received_per_device'])} | "
              f"{fmt_bytes(r['max_peak'])} |", flush=True)


if __name__ == "__main__":
    main()
