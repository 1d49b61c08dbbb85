"""Replication checking of a region's outputs (JAX's ``check_rep``).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ShardingError
from ..ir.program import Literal, Program
from ..sharding.dims import Sharding
from ..sharding.mesh import Mesh
from .groups import axes_of


# How each collective changes the mesh axes a value is the same along (replicated): a reduction or
# gather over axes makes it so; a scatter, permute or all-to-all over them makes it vary; an
# ordinary op is replicated where all its operands are.
_MAKES_REPLICATED = {"psum", "pmax", "pmin", "all_gather"}
_MAKES_VARYING = {"psum_scatter", "ppermute", "all_to_all"}


def _replicated_axes(body: Program, mesh: Mesh, in_specs: Sequence[Sharding]) -> dict:
    """Per body value, the mesh axes along which every device holds the same data."""
    every = frozenset(mesh.axis_names)
    rep: dict = {}
    for v, s in zip(body.inputs, in_specs):
        rep[v] = every - {a.name for d in s.dims for a in d.axes}  # replicated where its spec does not split it
    for e in body.eqns:
        ins = [rep[i] for i in e.inputs if not isinstance(i, Literal)]
        r = frozenset.intersection(*ins) if ins else every
        axes = frozenset(axes_of(e.kw["axis_name"])) if "axis_name" in e.kw else frozenset()
        if e.op in _MAKES_REPLICATED:
            r = r | axes
        elif e.op in _MAKES_VARYING:
            r = r - axes
        elif e.op == "axis_index":
            r = every - axes
        for o in e.outputs:
            rep[o] = r
    return rep


def check_replication(body: Program, mesh: Mesh, in_specs, out_specs, name: str) -> None:
    """A trace-time ShardingError where ``out_specs`` claims an output is replicated along axes the
    body does not make it so (it would assemble from devices holding different data)."""
    rep = _replicated_axes(body, mesh, in_specs)
    for k, (v, spec) in enumerate(zip(body.outputs, out_specs)):
        named = {a.name for d in spec.dims for a in d.axes} | {a.name for a in spec.unreduced}
        claimed = [a for a in mesh.axis_names if a not in named]
        varying = [a for a in claimed if a not in rep.get(v, frozenset(mesh.axis_names))]
        if varying:
            axes = ", ".join(f'"{a}"' for a in varying)
            raise ShardingError(
                "replication-check",
                f"shard_map region {name!r}: output {k} is declared replicated over mesh axes {axes} "
                f"(its out_specs, {spec}, does not name them) but the body computes it differently on the devices "
                f"along them; a psum (or all_gather) over {axes} is likely missing, or name the axes in out_specs. "
                "check_rep=False skips this check",
                axis=varying[0],
            )
