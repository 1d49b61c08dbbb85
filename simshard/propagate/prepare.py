"""``prepare``: a function and its arguments to the propagated Program a run partitions.

The compiler's half of ``ss.run`` (trace, then propagate unless the program is explicit), with
no execution, so ``explain``, ``RayMesh.compile`` and ``ss.run`` all see the same program:

    program, leaves = prepare(f, x, w, mesh=mesh, in_shardings=(P("x", None), None))

``f`` is an ``ss.jit`` / ``sjit`` function (shardings given there) or a plain function with
``in_shardings`` / ``out_shardings`` (PartitionSpecs, NamedShardings, Shardings, DTensorSpecs,
or Shardy text resolved against ``mesh``). ``leaves`` are the dynamic arguments' arrays, in
the program's input order.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import optree

from ..ir.program import Program


def prepare(f, *args, mesh=None, in_shardings=None, out_shardings=None, static_argnums: Sequence[int] = (),
            strategy: str = "user_priority") -> tuple[Program, list[np.ndarray]]:
    """The propagated Program of ``f(*args)`` and the arrays it takes (see the module docstring)."""
    from ..tracing.context import get_mesh
    from ..tracing.tracer import trace
    from . import propagate

    in_shardings, out_shardings = parse_text(in_shardings, mesh), parse_text(out_shardings, mesh)
    if _traces_itself(f):
        if in_shardings is not None or out_shardings is not None:
            raise TypeError("give shardings either to ss.jit / sjit or to ss.run, not both")
        program = f.trace(*args)
    else:
        program = trace(f, *args, in_shardings=in_shardings, out_shardings=out_shardings,
                        static_argnums=static_argnums, mesh=mesh)
    if program.mode != "explicit" or not program.shardings:
        program = propagate(program, strategy=strategy, mesh=mesh if mesh is not None else get_mesh())
    return program, dynamic_leaves(args, static_of(f, static_argnums))


def _traces_itself(f) -> bool:
    """An ``ss.jit`` / ``sjit`` function: it traces itself, with the shardings given to it."""
    return callable(getattr(f, "trace", None))


def static_of(f, static_argnums: Sequence[int] = ()) -> frozenset[int]:
    """The static argument positions: those of an ``ss.jit`` / ``sjit`` function, else ``static_argnums``."""
    if _traces_itself(f):
        return frozenset(getattr(f, "static_argnums", ()) or ())
    return frozenset(static_argnums)


def dynamic_leaves(args: Sequence, static) -> list[np.ndarray]:
    """The arrays of the non-static arguments, in the program's input order."""
    dynamic = [a for i, a in enumerate(args) if i not in static]
    return [np.asarray(x) for x in optree.tree_leaves(tuple(dynamic), none_is_leaf=False)]


def parse_text(spec: Any, mesh):
    """Sharding text anywhere in an in/out_shardings tree, parsed against ``mesh``: Shardy's
    ``'<@mesh, [{"x"}, {}]>'`` or an ArraySharding ``'{x, -1}'`` (``Sharding.from_text``); every
    other entry as given."""
    from ..errors import ShardingError
    from ..sharding.partition_spec import P
    from ..sharding.dims import Sharding

    if isinstance(spec, str):
        if mesh is None:
            raise ShardingError("no-mesh", f"the sharding {spec!r} is text; pass mesh= to resolve its mesh")
        return Sharding.from_text(spec, mesh)
    if isinstance(spec, P):
        return spec
    if type(spec) in (tuple, list):
        return type(spec)(parse_text(s, mesh) for s in spec)
    if isinstance(spec, dict):
        return {k: parse_text(v, mesh) for k, v in spec.items()}
    return spec
