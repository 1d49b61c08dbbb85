"""Whether an estimate's time grows with the device count: the same program estimated on 8
devices and on thousands, the walk and the reports kept per class of devices.

    python benchmarks/estimate_classes.py            # the MLP on 2x4 and 128x64, the 7B 3-D step on 65,536
    python benchmarks/estimate_classes.py --repeat 5
    python benchmarks/estimate_classes.py --clock process   # this process's CPU time: steadier on a shared machine

Cases: the Megatron MLP ``relu(x @ w1) @ w2`` (x 256x512, w1 512x1024, w2 1024x512; the batch over
``x``, the hidden dim over ``y``) forward and as an SGD step of the library's ``mlp`` 2-D
strategy, each on ``{x: 2, y: 4}`` and ``{x: 128, y: 64}`` (the best of ``--repeat`` runs in one
process, so both meshes find the same warm caches), and the ``gpt`` 7B configuration's 3-D step
(8 pipeline stages, 1,024-way data parallel, 8-way Megatron; ``gpt.estimate_pipeline``) on 65,536
devices, once; and the 7B data-parallel step on 1,024 x 8 devices, its time estimate without and
with 8-device nodes (InfiniBand between them). Each estimate's time includes the alpha-beta time
and the memory's maximum.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import simshard as ss
from simshard import P, programs
from simshard.programs import gpt
from simshard.report.pipeline import Pipeline
from simshard.report.topology import Nodes

CLOCK = time.perf_counter  # --clock process: time.process_time (what other processes take is not counted)
TOPOLOGY = ss.Topology({"x": "infiniband", "y": "nvlink", "pp": "infiniband"}, device="h100")


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def forward(mesh: dict) -> float:
    args = [ss.ShapeDtype(s, np.float32) for s in [(256, 512), (512, 1024), (1024, 512)]]
    start = CLOCK()
    est = ss.estimate(mlp, *args, mesh=ss.Mesh(mesh), in_shardings=(P("x", None), P(None, "y"), P("y", None)),
                      topology=TOPOLOGY)
    est.time.total, est.memory.max_peak, est.comm.total_received
    return CLOCK() - start


def sgd(mesh: dict) -> float:
    start = CLOCK()
    est = programs.load("mlp").estimate("2d", mesh=mesh, mode="sgd", topology=TOPOLOGY)
    est.time.total, est.memory.max_peak, est.comm.total_received
    return CLOCK() - start


def pipeline_7b() -> float:
    start = CLOCK()
    pe = gpt.estimate_pipeline("7b", "2d", {"pp": 8, "x": 1024, "y": 8}, Pipeline(8, 1, "1f1b"), TOPOLOGY)
    pe.step_seconds(), pe.peak_bytes
    return CLOCK() - start


def nodes_7b() -> tuple[float, float, float]:
    """The 7B data-parallel step on 1,024 x 8 devices: the estimate's seconds, and the time
    estimate's seconds without and with 8-device nodes on InfiniBand."""
    start = CLOCK()
    est = gpt.program("7b").estimate("dp", mesh={"x": 1024, "y": 8}, mode="sgd")
    walked = CLOCK() - start
    flat = ss.Topology({"y": "nvlink"}, "infiniband")
    nodes = ss.Topology({"y": "nvlink"}, "infiniband", Nodes(8, "infiniband"))
    out = [walked]
    for topo in (flat, nodes):
        start = CLOCK()
        est.comm.estimate(topo)
        out.append(CLOCK() - start)
    return tuple(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-7b", action="store_true", help="leave out the 7B steps")
    ap.add_argument("--clock", choices=("wall", "process"), default="wall",
                    help="wall-clock time, or this process's CPU time (steadier where other work loads the machine)")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "process" else time.perf_counter
    print("| case | 8 devices | 8,192 devices | ratio |")
    print("|---|---|---|---|")
    for name, case in (("MLP forward 256x512x1024", forward), ("MLP 2-D SGD step", sgd)):
        small = min(case({"x": 2, "y": 4}) for _ in range(args.repeat))
        large = min(case({"x": 128, "y": 64}) for _ in range(args.repeat))
        print(f"| {name} | {small * 1e3:.1f} ms | {large * 1e3:.1f} ms | {large / small:.2f} |", flush=True)
    if not args.no_7b:
        walked, flat, nodes = nodes_7b()
        print(f"\n7B dp step on 1,024 x 8 devices: estimate {walked:.1f} s; its time estimate {flat:.2f} s flat, "
              f"{nodes:.2f} s with 8-device nodes")
        print(f"7B 3-D step (8 x 1024 x 8 = 65,536 devices, 1F1B): {pipeline_7b():.1f} s")


if __name__ == "__main__":
    main()
