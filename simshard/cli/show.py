"""``simshard show SHARDING SHAPE``: draw which device holds which block of an array.

The sharding is read in any of the spellings simshard speaks, told apart by its first
characters: Shardy text (``<@mesh, [{"x"}, {}]>``), a JAX PartitionSpec (``P("x", None)``), a
DTensor placement list (``[Shard(0), Replicate()]``, one placement per mesh axis) or the FHE
compiler's ArraySharding (``{y, z, -1}`` or ``{1, 2, -1}``, per dim a mesh axis or -1). Under the
drawing it prints the same layout in the other spellings where they can say it.
"""

from __future__ import annotations

import re

from simshard import DTensorSpec, NamedSharding, Sharding, parse_partition_spec, parse_placements
from simshard.errors import ShardingError
from simshard.sharding.show import MAX_DRAWN_DEVICES, render

from . import options
from .errors import EXIT_OK, UsageError
from .output import Output


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="draw the layout of a sharding (Shardy text, P(...) or a placement list)",
                       description=options.description(__doc__))
    p.add_argument("sharding", help='<@mesh, [{"x"}, {}]>, P("x", None), [Shard(0), Replicate()] or {x, -1}')
    p.add_argument("shape", help="global shape, e.g. 8,16")
    p.add_argument("--mesh", default="x=2,y=4", metavar="x=2,y=4", help="mesh axes and sizes (default x=2,y=4)")
    p.set_defaults(execute=execute)


def read_sharding(text: str, mesh):
    """A Sharding, NamedSharding or DTensorSpec over ``mesh`` from any of the four spellings (an
    ArraySharding ``{x, -1}`` gives a Sharding). Shardy text may call the mesh by any name (``@mesh``, ``@m``): there is only one."""
    t = text.strip()
    if t.startswith("{"):  # the FHE compiler's ArraySharding, {y, z, -1}
        return Sharding.from_text(t, mesh)
    if t.startswith("<"):
        named = re.match(r"<\s*@([\w.-]+)", t)
        m = mesh.renamed(named[1]) if named else mesh
        return Sharding.parse(t, {m.name: m})
    if re.match(r"^[\w.]*\b(P|PartitionSpec)\s*\(", t):
        return NamedSharding(mesh, parse_partition_spec(t))
    if t[:1] in "[(" or re.match(r"^_?(Shard|Replicate|Partial|StridedShard|S|R)\b", t):
        return DTensorSpec(mesh, parse_placements(t))
    raise UsageError(f"cannot tell which spelling {text!r} is: give Shardy text <@mesh, [{{\"x\"}}, {{}}]>, "
                     "a PartitionSpec P(\"x\", None), a placement list [Shard(0), Replicate()] "
                     "or an ArraySharding {x, -1}")


def equivalents(spec, shape) -> list[str]:
    """The layout in each spelling: Shardy, P, placements (or why a spelling cannot say it)."""
    rank = len(shape)
    if isinstance(spec, NamedSharding):
        sharding = spec.to_sharding(rank)
    elif isinstance(spec, DTensorSpec):
        try:
            sharding = Sharding.from_dtensor(spec, shape)
        except ShardingError as e:
            sharding = e
    else:
        sharding = spec

    def attempt(f) -> str:
        try:
            return str(f())
        except ShardingError as e:
            return f"not expressible ({e.detail})"

    if isinstance(sharding, ShardingError):
        return [f"Shardy:     not expressible ({sharding.detail})"]
    lines = [f"type:       {sharding.type_string(shape, 'float32')}", f"Shardy:     {sharding}",
             f"P:          {attempt(lambda: sharding.to_named().spec)}"]
    placements = spec if isinstance(spec, DTensorSpec) else None
    lines.append(f"placements: {attempt(lambda: placements or sharding.to_dtensor(shape))}")
    return lines


def execute(args, out: Output) -> int:
    mesh = options.parse_mesh(args.mesh)
    shape = options.parse_shape(args.shape)
    spec = read_sharding(args.sharding, mesh)
    drawing = render(spec, shape)  # a shape that does not fit raises here, before anything prints
    out.print(drawing)
    if spec.mesh.size <= MAX_DRAWN_DEVICES:  # the other spellings are checked on the layout itself
        for line in equivalents(spec, shape):
            out.line(line)
    return EXIT_OK
