"""Text and list spellings of a sharding, read once for every API that takes one.

A sharding given by a user may be Shardy text (``'<@mesh, [{"x"}, {}]>'``), the FHE design's
ArraySharding text (``"{y, z, -1}"``), DTensor placement text (``"[S(0), R]"``,
``"[Shard(0), Partial(sum)]"``) or a bare placement list (``[Shard(0), Replicate()]``); all but
Shardy's text need a mesh. ``from_spelling`` turns them into a
``Sharding`` / ``DTensorSpec`` and leaves every other spelling (``P``, ``NamedSharding``,
``Sharding``, ``DTensorSpec``) as it is, so the callers that resolve shardings (``ss.run``'s
in/out shardings, ``ss.reshard``, sharding constraints, ``devices.put``) share one reading.
"""

from __future__ import annotations

from typing import Any

from ..errors import ShardingError
from .mesh import Mesh
from .placements import DTensorSpec, Placement, parse_placements


def is_placement_list(x: Any) -> bool:
    """A non-empty list or tuple of Placements: one sharding (a leaf of a sharding tree), not a
    tree of shardings."""
    return type(x) in (list, tuple) and len(x) > 0 and all(isinstance(p, Placement) for p in x)


def is_shardy_text(text: str) -> bool:
    """Shardy's spelling (``<@mesh, [...]>`` or ``#sdy.sharding<...>``), as opposed to placement text."""
    t = text.lstrip()
    return t.startswith("<") or t.startswith("#sdy")


def is_array_sharding_text(text: str) -> bool:
    """The FHE design's ArraySharding spelling, ``{y, z, -1}`` (per tensor dim an axis or -1)."""
    return text.lstrip().startswith("{")


def is_sharding_text(x: Any) -> bool:
    """Text that spells a whole sharding: Shardy's, or a bracketed placement list (``"[S(0), R]"``);
    not a bare word such as an axis name."""
    return isinstance(x, str) and (is_shardy_text(x) or x.strip()[:1] in ("[", "(", "{"))


def from_spelling(spec: Any, mesh: Mesh | None, where: str = "sharding") -> Any:
    """``spec`` with text and bare placement lists read against ``mesh`` (ShardingError naming
    ``where`` when there is no mesh or the text does not read); anything else unchanged."""
    from .dims import Sharding

    if isinstance(spec, str):
        if mesh is None:
            kind = "Shardy text" if is_shardy_text(spec) else "placement text"
            raise ShardingError("no-mesh", f"{where}: the sharding {spec!r} is {kind}; pass mesh= to resolve its mesh")
        if is_shardy_text(spec) or is_array_sharding_text(spec):
            return Sharding.from_text(spec, mesh)
        return _spec(parse_placements(spec), mesh, where)
    if is_placement_list(spec):
        if mesh is None:
            shown = "[" + ", ".join(map(str, spec)) + "]"
            raise ShardingError("no-mesh", f"{where}: the placement list {shown} needs a mesh; pass mesh=")
        return _spec(tuple(spec), mesh, where)
    return spec


def _spec(placements: tuple[Placement, ...], mesh: Mesh, where: str) -> DTensorSpec:
    try:
        return DTensorSpec(mesh, placements)
    except ShardingError as e:
        raise ShardingError(e.rule, f"{where}: {e.detail}", axis=e.axis, dim=e.dim) from None
