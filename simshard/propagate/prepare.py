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
from .strided import strided_outputs


def prepare(f, *args, mesh=None, in_shardings=None, out_shardings=None, static_argnums: Sequence[int] = (),
            strategy: str = "user_priority") -> tuple[Program, list[np.ndarray]]:
    """The propagated Program of ``f(*args)`` and the arrays it takes (see the module docstring)."""
    from ..tracing.context import get_mesh
    from ..tracing.tracer import trace
    from . import propagate

    in_shardings, out_shardings = parse_text(in_shardings, mesh, "in_shardings"), parse_text(out_shardings, mesh, "out_shardings")
    if _traces_itself(f):
        if in_shardings is not None or out_shardings is not None:
            raise TypeError("give shardings either to ss.jit / sjit or to ss.run, not both")
        program = f.trace(*args)
    else:
        program = trace(f, *args, in_shardings=in_shardings, out_shardings=out_shardings,
                        static_argnums=static_argnums, mesh=mesh)
    if program.mode != "explicit" or not program.shardings:
        program = propagate(program, strategy=strategy, mesh=mesh if mesh is not None else get_mesh())
        program = strided_outputs(program)  # flattened outputs only placements can state (seed 002)
    elif is_mixed(program):  # typed where axes were Explicit, the rest left to propagation
        done = propagate(program, strategy=strategy, mesh=mesh if mesh is not None else get_mesh())
        program = done.with_shardings(done.shardings, mode="explicit", info=done.info)
    return program, dynamic_leaves(args, static_of(f, static_argnums))


def is_mixed(program: Program) -> bool:
    """An explicit program with Auto parts: a value typed with no sharding (made in an
    ``auto_axes`` region, or outside an ``explicit_axes`` one) or with a dim open for Auto axes."""
    shardings = program.shardings
    for v in program.values():
        s = shardings.get(v)
        if s is None or any(getattr(d, "is_open", False) for d in getattr(s, "dims", ())):
            return True
    return False


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


def parse_text(spec: Any, mesh, where: str = "sharding"):
    """Text (Shardy's ``'<@mesh, [{"x"}, {}]>'`` or placement text ``"[S(0), R]"``) and bare
    placement lists anywhere in an in/out_shardings tree, read against ``mesh``
    (``sharding.spelling``); every other entry as given. Without ``mesh`` they stay as they are,
    for the trace to read on the ambient mesh (``ss.set_mesh``)."""
    from ..sharding.partition_spec import P
    from ..sharding.spelling import from_spelling, is_placement_list

    if isinstance(spec, str) or is_placement_list(spec):
        return spec if mesh is None else from_spelling(spec, mesh, where)
    if isinstance(spec, P):
        return spec
    if type(spec) in (tuple, list):
        return type(spec)(parse_text(s, mesh, f"{where}[{i}]") for i, s in enumerate(spec))
    if isinstance(spec, dict):
        return {k: parse_text(v, mesh, f"{where}[{k!r}]") for k, v in spec.items()}
    return spec
