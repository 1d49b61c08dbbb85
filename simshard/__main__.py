"""``simshard`` / ``python -m simshard``: the command line.

* ``simshard`` / ``simshard mlp`` (the main job): a Megatron-sharded MLP run on the device
  mesh, verified bit for bit against plain numpy, with its communication and memory tables;
* ``simshard demo``: a few shardings in both dialects and their layouts;
* ``simshard show SHARDING SHAPE --mesh x=2,y=4``: draw one layout.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from . import DTensorSpec, Mesh, NamedSharding, P, Shard, Sharding, ShardingError, StridedShard, equivalent, show


def _mesh_arg(text: str) -> Mesh:
    axes = []
    for item in text.split(","):
        name, _, size = item.partition("=")
        if not size.strip().isdigit():
            raise ShardingError("invalid-mesh", f"--mesh expects name=size pairs like x=2,y=4, got {text!r}")
        axes.append((name.strip(), int(size)))
    return Mesh(axes)


def demo(console: Console) -> None:
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


def mlp_job(console: Console, backend: str | None = None) -> int:
    """The main job: a two-layer MLP, column- then row-parallel (Megatron) with data parallelism."""
    import numpy as np

    from . import P, exact_inputs, run

    mesh = Mesh({"x": 2, "y": 4})

    def mlp(x, w1, w2):
        return np.maximum(x @ w1, 0) @ w2  # ReLU keeps integer inputs exact, so sums check bitwise

    x, w1, w2 = exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)
    from .runtime.api import default_backend

    backend = backend or default_backend()
    console.rule(f"[bold]simshard: a Megatron MLP on mesh x=2, y=4, backend {backend}")
    res = run(mlp, x, w1, w2, mesh=mesh, backend=backend, in_shardings=(P("x", None), P(None, "y"), P("y", None)))
    console.print(res.program.pretty())
    verdict = "[green]bitwise identical to plain numpy[/]" if res.verify.bitwise else f"[red]DIFFERS[/]\n{res.verify}"
    console.print(f"\nverification: {verdict}\n")
    console.print(res.comm.table("op"))
    console.print(res.comm.table("kind"))
    console.print(res.memory.table())
    return 0 if res.verify.bitwise else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simshard", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd")
    p_mlp = sub.add_parser("mlp", help="the main job: run a sharded MLP, verify it, report its cost (default)")
    p_mlp.add_argument("--backend", choices=("ray", "local"), default=None,
                       help="ray (one actor per device; the default) or local (one process)")
    sub.add_parser("demo", help="parse a few shardings and draw their layouts")
    p_show = sub.add_parser("show", help="draw the layout of one Shardy sharding")
    p_show.add_argument("sharding", help='Shardy text, e.g. \'<@mesh, [{"x"}, {}]>\'')
    p_show.add_argument("shape", help="global shape, e.g. 8,16")
    p_show.add_argument("--mesh", default="x=2,y=4", help="mesh axes, e.g. x=2,y=4")
    args = parser.parse_args(argv)
    console = Console()
    try:
        if args.cmd in (None, "mlp"):
            return mlp_job(console, getattr(args, "backend", None))
        if args.cmd == "demo":
            demo(console)
        elif args.cmd == "show":
            mesh = _mesh_arg(args.mesh)
            shape = tuple(int(d) for d in args.shape.replace("x", ",").split(",") if d.strip())
            show(Sharding.parse(args.sharding, {mesh.name: mesh}), shape, console)
    except ShardingError as e:
        console.print(f"[red]error:[/] {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
