"""How long ``ss.autoshard`` takes to search a training step, and what it finds: the issue's goals
are GPT-2 small on 64 devices within 10 s and the 7B step on 8,192 devices within 60 s.

    python benchmarks/autoshard_solve.py                           # the default cases below
    python benchmarks/autoshard_solve.py --case 7b:64x128 --device-memory 80
    python benchmarks/autoshard_solve.py --case gpt2-small:8x8 --compare

A case is ``CONFIG[@LAYERS]:XxY[xZ]``: a configuration of the ``gpt`` program (``tiny``,
``gpt2-small``, ``7b``), with ``LAYERS`` layers instead of its own where given (layers are in a
scan, so the search does not grow with the layer count: ``gpt2-small@64`` and ``@128`` show it,
the same variables and rows; counts that divide differently by the mesh's axes give the
stacked parameters other layouts, a few more or fewer variables), on a mesh of axes
``x``, ``y`` (and ``z``), NVLink on every axis and an H100's compute; an axis of size 1
(``gpt2-small:8x1x8``) splits nothing and gives the search of the mesh without it. Prints the search's wall
time (trace, building the integer program, solving it; with ``--device-memory GB`` also the
estimate that checks the budget), its size, and the estimated step it found; ``--compare`` also
estimates the hand-written strategies on the same mesh (slow on thousands of devices).

    python benchmarks/autoshard_solve.py --pipeline gpt2-small:4x4x4 --microbatches 8,16,32

``--pipeline CONFIG:PxXxY`` searches a pipelined step instead (``programs/gpt_pipeline.py``:
Alpa's inter-op DP over ``P`` stages, each distinct stage searched by ``ss.autoshard`` on
``x`` by ``y``) and prints its wall time, the stage searches it took, the split, ``M`` and the
estimated step.
"""

from __future__ import annotations

import argparse
import time

import simshard as ss
from simshard.programs import gpt
from simshard.programs.auto import step_and_ties
from simshard.programs.gpt_pipeline import search_pipeline

CASES = ("gpt2-small:8x8", "gpt2-small@64:8x8", "gpt2-small@128:8x8", "7b:64x128", "7b:8x32x32")
TOPOLOGY = ss.Topology({}, "nvlink", device="h100")


def mesh_of(text: str) -> ss.Mesh:
    sizes = [int(n) for n in text.split("x")]
    return ss.Mesh(dict(zip("xyz", sizes)))


def run_case(case: str, memory_gb: float | None = None, compare: bool = False) -> dict:
    """Search one case, print its line, and return its figures."""
    config, mesh_text = case.split(":")
    name, _, layers = config.partition("@")
    program, mesh = gpt.program(name, int(layers) if layers else None), mesh_of(mesh_text)
    budget = None if memory_gb is None else int(memory_gb * 2**30)
    start, cpu = time.perf_counter(), time.process_time()
    f, args, ties = step_and_ties(program, "sgd")  # not programs.auto.search: it remembers searches
    found = ss.autoshard(f, *args, mesh=mesh, device_memory=budget, topology=TOPOLOGY, ties=ties, explain_top=0)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    r = found.report
    print(f"{case:<18} {mesh.size:>6} devices  search {wall:6.2f} s, cpu {cpu:6.2f} s (solve {r.solve_seconds:5.2f} s)  "
          f"{r.variables:>7} variables {r.rows:>6} rows  step {r.breakdown.total * 1e3:9.3f} ms "
          f"(compute {r.breakdown.compute * 1e3:.3f}, communication {r.breakdown.communication * 1e3:.3f})"
          + ("" if budget is None else f"  peak {r.estimated_peak / 2**30:.2f} GiB of {memory_gb:g}")
          + ("" if r.optimal else "  (not proven optimal)"))
    figures = {"devices": mesh.size, "seconds": wall, "cpu_seconds": cpu, "solve_seconds": r.solve_seconds,
               "variables": r.variables, "rows": r.rows,
               "step_seconds": r.breakdown.total, "strategy": found}
    if compare:
        for s in list(program.strategies) + [program.auto(device_memory=budget, topology=TOPOLOGY, explain_top=0)]:
            est = program.estimate(s, mesh=mesh, mode="sgd", topology=TOPOLOGY)
            print(f"    {s.name:<9} estimated step {est.step_seconds() * 1e3:9.3f} ms, "
                  f"peak {est.memory.max_peak / 2**30:8.2f} GiB")
    return figures


def run_pipeline_case(case: str, microbatches: tuple[int, ...] | None = None) -> dict:
    """Search one pipelined case, ``CONFIG:PxXxY`` (a pipeline axis ``pp`` of P stages, then ``x``
    and ``y``): Alpa's inter-op DP with ``ss.autoshard`` inside each distinct stage."""
    config, mesh_text = case.split(":")
    sizes = [int(n) for n in mesh_text.split("x")]
    mesh = ss.Mesh(dict(zip(("pp", "x", "y"), sizes)))
    start = time.perf_counter()
    found = search_pipeline(gpt.program(config), mesh, "pp", topology=TOPOLOGY, microbatches=microbatches)
    wall = time.perf_counter() - start
    est = found.estimate
    print(f"{case:<18} {mesh.size:>6} devices  search {wall:7.2f} s  {found.searches:>4} stage searches  layers "
          f"{'+'.join(map(str, found.plan.layers))}, M {found.plan.microbatches}  step {est.step_seconds() * 1e3:9.3f} ms "
          f"(bubble {est.bubble_seconds() * 1e3:.3f})")
    return {"devices": mesh.size, "seconds": wall, "searches": found.searches, "step_seconds": est.step_seconds(),
            "strategy": found}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", help="CONFIG[@LAYERS]:XxY[xZ] (repeatable; default: the cases above)")
    p.add_argument("--device-memory", type=float, default=None, metavar="GB", help="the budget per device, GiB")
    p.add_argument("--compare", action="store_true", help="also estimate the hand-written strategies")
    p.add_argument("--pipeline", action="append", metavar="CONFIG:PxXxY",
                   help="a pipelined case (axis pp of P stages, then x and y; repeatable): only these run")
    p.add_argument("--microbatches", metavar="M1,M2", help="with --pipeline: the microbatch counts (default: all)")
    args = p.parse_args()
    if args.pipeline:
        counts = None if args.microbatches is None else tuple(int(m) for m in args.microbatches.split(","))
        for case in args.pipeline:
            run_pipeline_case(case, counts)
        return
    for case in args.case or CASES:
        run_case(case, args.device_memory, args.compare)


if __name__ == "__main__":
    main()
