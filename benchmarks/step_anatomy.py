"""Where one step's time goes on the Ray backend: the driver's call, each device's instructions,
and the answer, from the devices' own timelines (``Execution.timeline``: wall-clock spans, so
processes of one machine line up with the driver's clock).

For each step it notes when the driver began the call and when it had the answers, and from the
devices' spans: the dispatch (call begun to a device's first instruction), each instruction's
time (median over steps, per kind), the devices' spread at the start and at the end, and the
return (last instruction ended to the driver holding every answer). Medians over the timed
steps; the driver's CPU per step beside its wall.

    python benchmarks/step_anatomy.py [--shape 128,256,1024] [--mesh 2,4] [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import peers  # noqa: E402  (beside this file)

import simshard as ss  # noqa: E402


def us(x: float) -> str:
    return f"{x * 1e6:.0f} us"


def anatomy(shape, mesh_shape, steps: int, per_process: int | None, busy_poll: bool | None,
            algorithm: str = "direct") -> list[str]:
    """The median parts of a resident Megatron MLP step (module docstring), as lines."""
    from simshard.runtime.ray.driver.mesh import RayMesh

    args, specs = peers.mlp_inputs(*shape)
    mesh = ss.Mesh({"x": mesh_shape[0], "y": mesh_shape[1]})
    with RayMesh(mesh, devices_per_process=per_process, busy_poll=busy_poll) as devices:
        step = devices.compile(peers.mlp, *args, in_shardings=specs, timeout=120.0, algorithm=algorithm)
        resident = devices.put(args, specs)
        for _ in range(20):
            step(*resident).arrays
        rows = []
        cpu = time.process_time()
        for _ in range(steps):
            t0 = time.time()
            ex = step(*resident).execution
            rows.append((t0, time.time(), ex))
        cpu = (time.process_time() - cpu) / steps
        polling = devices.polling(devices.devices[0])
        used = peers.routes_used(rows[-1][2], devices)
    parts = defaultdict(list)
    for t0, t1, ex in rows:
        firsts, lasts = [], []
        for d in ex.timeline:
            spans = ex.timeline[d]
            firsts.append(spans[0].start)
            lasts.append(spans[-1].end)
            for s in spans:
                parts[f"instr {s.position} {s.kind} ({s.source[:40]})"].append(s.end - s.start)
            for a, b in zip(spans, spans[1:]):
                parts[f"gap before instr {b.position} {b.kind}"].append(b.start - a.end)
        parts["wall (driver)"].append(t1 - t0)
        parts["dispatch: call begun to the first device's first instruction"].append(min(firsts) - t0)
        parts["dispatch: call begun to the last device's first instruction"].append(max(firsts) - t0)
        parts["devices: first start to last end"].append(max(lasts) - min(firsts))
        parts["return: last device's end to the driver holding the answers"].append(t1 - max(lasts))
    lines = [f"Megatron MLP {'x'.join(map(str, shape))} on {'x'.join(map(str, mesh_shape))}, {steps} steps, "
             f"polling {polling}, collectives {algorithm}; {used}",
             f"driver CPU per step: {us(cpu)}"]
    lines += [f"{k}: median {us(statistics.median(v))}, p10 {us(sorted(v)[len(v) // 10])}" for k, v in parts.items()]
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="128,256,1024", help="batch,d,d_ff")
    ap.add_argument("--mesh", default="2,4", help="x,y")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--per-process", type=int, default=None)
    ap.add_argument("--poll", choices=("default", "on", "off"), default="default")
    ap.add_argument("--algorithm", choices=("direct", "ring", "oneshot"), default="direct")
    a = ap.parse_args(argv)
    poll = {"default": None, "on": True, "off": False}[a.poll]
    shape = tuple(int(v) for v in a.shape.split(","))
    mesh_shape = tuple(int(v) for v in a.mesh.split(","))
    for line in anatomy(shape, mesh_shape, a.steps, a.per_process, poll, a.algorithm):
        print(line, flush=True)


if __name__ == "__main__":
    main()
