"""``simshard`` / ``simshard mlp``: the main job (README command 1), and ``simshard demo``.

The main job runs a two-layer MLP sharded Megatron-style (batch over ``x``, the hidden dim over
``y``) on the 2x4 mesh, prints its propagated program, the bitwise verdict and the
communication and memory tables. ``demo`` parses a few shardings in both dialects and draws them.
"""

from __future__ import annotations

import numpy as np

from simshard import (
    DTensorSpec, Mesh, NamedSharding, P, Shard, Sharding, ShardingError, StridedShard, equivalent, exact_inputs, run, show,
)

from .errors import EXIT_FAILED, EXIT_OK
from .output import Output


def add_parsers(sub) -> None:
    p = sub.add_parser("mlp", help="the main job: run a sharded MLP, verify it, report its cost (default)")
    p.add_argument("--backend", choices=("ray", "local"), default=None,
                   help="ray (one actor per device; the default) or local (one process)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(execute=mlp_job)
    d = sub.add_parser("demo", help="parse a few shardings and draw their layouts")
    d.set_defaults(execute=demo)


def mlp_job(args, out: Output) -> int:
    """A two-layer MLP, column- then row-parallel (Megatron) with data parallelism."""
    from simshard.runtime.front.api import default_backend  # the runtime: ~40 ms of asyncio and sockets, not for --help

    mesh = Mesh({"x": 2, "y": 4})

    def mlp(x, w1, w2):
        return np.maximum(x @ w1, 0) @ w2  # ReLU keeps integer inputs exact, so sums check bitwise

    x, w1, w2 = exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    backend = getattr(args, "backend", None) or default_backend()
    console = out.console
    console.rule(f"[bold]simshard: a Megatron MLP on mesh x=2, y=4, backend {backend}")
    with out.spinner("the Megatron MLP") as stage:
        res = run(mlp, x, w1, w2, mesh=mesh, backend=backend, progress=stage,
                  in_shardings=(P("x", None), P(None, "y"), P("y", None)))
    console.print(res.program.pretty())
    if res.verify.bitwise:
        verdict = "[green]bitwise identical to plain numpy[/]"
    elif res.verify.ok:
        verdict = f"[yellow]equal to plain numpy up to reassociated float sums[/]\n{res.verify}"
    else:
        verdict = f"[red]DIFFERS[/]\n{res.verify}"
    console.print(f"\nverification: {verdict}\n")
    console.print(res.comm.table("op"))
    console.print(res.comm.table("kind"))
    console.print(res.memory.table())
    return EXIT_OK if res.verify.bitwise else EXIT_FAILED


def demo(args, out: Output) -> int:
    console = out.console
    mesh = Mesh({"x": 2, "y": 4})
    console.rule("[bold]simshard: who holds what")
    console.print(f"mesh {mesh}\n")
    s = Sharding.parse('<@mesh, [{"x"}, {"y", ?}p1]>', mesh)
    show(s, (8, 16), console)
    console.print(f"type string: {s.type_string((8, 16), 'float32')}   as placements: {s.to_dtensor((8, 16))}\n")

    uneven = Sharding.parse('<@mesh, [{"x", "y"}]>', mesh)
    show(uneven, (10,), console)
    nested = DTensorSpec(mesh, [Shard(0), Shard(0)])
    show(nested, (10,), console)
    try:
        uneven.to_dtensor((10,))
    except ShardingError as e:
        console.print(f"[yellow]no exact placement list for the flat rule here:[/] {e}\n")

    swapped = DTensorSpec(mesh, [StridedShard(0, split_factor=4), Shard(0)])
    console.print(f"{swapped} is {Sharding.from_dtensor(swapped, (8,))} (y major, x minor)\n")

    full = Mesh({"devices": 8}, name="mesh_full")
    xy = Mesh({"x": 4, "y": 2}, name="mesh_xy")
    a = Sharding.parse('<@mesh_xy, [{"x"}, {"y"}]>', xy)
    b = Sharding.parse('<@mesh_full, [{"devices":(1)4}, {"devices":(4)2}]>', full)
    console.print(f"{a} and {b} hold the same data on every device: {equivalent(a, b, (4, 4))}")
    show(NamedSharding(mesh, P(("x", "y"), None)), (16, 4), console)
    return EXIT_OK
