"""How long ``ss.estimate`` takes on large meshes, and what it says: training steps (SGD) of the
library's programs at real shapes, per strategy and mesh.

    python benchmarks/estimate_scale.py                       # the default cases below
    python benchmarks/estimate_scale.py --case gpt2-small:dp:32x32

A case is ``PROGRAM:STRATEGY:XxY``, PROGRAM a library program or ``gpt2-small`` / ``7b`` (the
``gpt`` program's configurations), or ``GPT:3d:PxXxY:M`` for the 3-D strategy of a GPT
configuration: P pipeline stages (1F1B, M microbatches), each stage data parallel over X and
Megatron over Y (``gpt.estimate_pipeline``). Prints seconds, bytes received per device and the
largest peak memory per device (for a pipeline, per step: a middle stage device receives its
collectives and the activations and gradients from its neighbour stages).

    python benchmarks/estimate_scale.py --partition           # partition time, 8 devices vs the case's mesh

``--partition`` times the partitioner alone (the program traced and propagated beforehand, the
best of three runs) on a 2x4 mesh and on each case's mesh: the issue's goal is 1,024 devices
within 2x of 8.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from simshard import programs
from simshard.partition import partition
from simshard.programs import gpt
from simshard.report.pipeline import Pipeline
from simshard.report.topology import Topology
from simshard.units import fmt_bytes

CASES = ("mlp:megatron:64x128", "mlp:fsdp:64x128", "gpt2-small:dp:32x32", "gpt2-small:fsdp:32x32",
         "gpt2-small:fsdp-no-reshard:32x32")
PARTITION_CASES = ("mlp:dp:32x32", "mlp:megatron:32x32", "mlp:fsdp:32x32", "mlp:2d:32x32", "transformer:dp:32x32",
                   "transformer:sequence:32x32", "transformer:megatron:32x32", "gpt2-small:dp:32x32",
                   "gpt2-small:fsdp:32x32", "7b:dp:32x32")


def load(name: str):
    return gpt.program(name) if name in gpt.CONFIGS else programs.load(name)


def run_case(case: str) -> dict:
    if ":3d:" in case:
        return run_pipeline_case(case)
    name, strategy, mesh = case.split(":")
    x, y = (int(n) for n in mesh.split("x"))
    prog = load(name)
    start = time.perf_counter()
    est = prog.estimate(strategy, mesh={"x": x, "y": y}, mode="sgd")
    seconds = time.perf_counter() - start
    devices = x * y
    return {"case": case, "devices": devices, "seconds": seconds,
            "received_per_device": est.comm.total_received / devices, "max_peak": est.memory.max_peak}


def run_pipeline_case(case: str) -> dict:
    name, _, mesh, microbatches = case.split(":")
    pp, x, y = (int(n) for n in mesh.split("x"))
    topology = Topology({"pp": "infiniband", "x": "infiniband", "y": "nvlink"}, device="h100")
    start = time.perf_counter()
    pe = gpt.estimate_pipeline(name, "2d", {"pp": pp, "x": x, "y": y}, Pipeline(pp, int(microbatches), "1f1b"), topology)
    seconds = time.perf_counter() - start
    return {"case": case, "devices": pp * x * y, "seconds": seconds,
            "received_per_device": pe.collective_bytes + pe.transfer_bytes, "max_peak": pe.peak_bytes}


def partition_seconds(case: str, trials: int = 3) -> dict:
    """The partitioner's time for one SGD step of ``case`` on a 2x4 mesh and on the case's mesh:
    the best of ``trials`` runs, each in a fresh process (the planner's caches cold, as a user's
    first partition of a program finds them)."""
    name, strategy, mesh = case.split(":")
    x, y = (int(n) for n in mesh.split("x"))
    out = {"case": case, "devices": x * y}
    for key, shape in (("small", "2x4"), ("large", mesh)):
        runs = [subprocess.run([sys.executable, __file__, "--partition-once", f"{name}:{strategy}:{shape}"], check=True,
                               capture_output=True, text=True).stdout for _ in range(trials)]
        out[key] = min(float(r.split()[-1]) for r in runs)
    return out


def partition_once(case: str) -> float:
    name, strategy, mesh = case.split(":")
    x, y = (int(n) for n in mesh.split("x"))
    program = load(name).program(strategy, mesh={"x": x, "y": y}, mode="sgd")
    start = time.perf_counter()
    partition(program)
    return time.perf_counter() - start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help="PROGRAM:STRATEGY:XxY (repeatable; default: a set of cases)")
    ap.add_argument("--partition", action="store_true", help="time the partitioner on 8 devices and on the case's mesh")
    ap.add_argument("--partition-once", help=argparse.SUPPRESS)  # one timed partition, in a fresh process
    args = ap.parse_args(argv)
    if args.partition_once:
        print(f"{partition_once(args.partition_once):.6f}")
        return
    if args.partition:
        print("| case | devices | partition, 8 devices | partition, the case's mesh | ratio |")
        print("|---|---|---|---|---|")
        for case in args.case or PARTITION_CASES:
            r = partition_seconds(case)
            print(f"| {r['case']} | {r['devices']:,} | {r['small']:.3f} s | {r['large']:.3f} s | {r['large'] / r['small']:.2f} |",
                  flush=True)
        return
    print("| case | devices | estimate took | received per device | peak memory per device |")
    print("|---|---|---|---|---|")
    for case in args.case or CASES:
        r = run_case(case)
        print(f"| {r['case']} | {r['devices']:,} | {r['seconds']:.1f} s | {fmt_bytes(r['received_per_device'])} | "
              f"{fmt_bytes(r['max_peak'])} |", flush=True)


if __name__ == "__main__":
    main()
