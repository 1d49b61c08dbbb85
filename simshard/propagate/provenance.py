"""Where each dimension's axes came from, and ``explain`` that reads it back.

Every axis a dimension holds was either written by the user (an annotation: an input, an
output, a sharding constraint, an op's result annotation, with the dimension's priority) or
appended by propagation through one op along one factor, copied from a dimension of another
tensor of that op. Following those hops back gives the chain ``annotation -> op -> op -> ...``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Hashable, Sequence

from ..sharding.axes import AxisRef
from ..sharding.dims import Sharding
from . import axis_math as am


@dataclass(frozen=True)
class Origin:
    axes: tuple[AxisRef, ...]
    annotation: str | None = None  # set for user annotations
    priority: int | None = None
    node: int | None = None  # the op index (None for a function-result edge)
    op: str | None = None  # op name, or "return" for the edge to a function result
    factor: str | None = None
    source: tuple[Hashable, int] | None = None  # (value key, dim) the axes were copied from
    stage: str = ""  # the propagation round (user priority / op-priority stage)
    sizes: tuple[tuple[str, int], ...] = ()  # the mesh's axis sizes, to compare sub-axes


class SkipReason(enum.Enum):
    """Why propagation went past an op (``OpOutcome.skipped``, ``Provenance.skipped``)."""

    NO_RULE = "the op has no sharding rule"
    NO_MESH = "none of its tensors is sharded on a mesh with axes"
    MESHES_DIFFER = "its tensors are on different meshes"


@dataclass(frozen=True)
class Skipped:
    """An op propagation went past without looking at its factors, and why (no sharding rule,
    no tensor sharded on a mesh with axes, tensors on different meshes), in the round it was
    last skipped."""

    node: int
    op: str
    reason: SkipReason
    stage: str = ""


class Provenance:
    """Origins per (value key, dim), in the order they were recorded; and the ops skipped, by
    op index (the last time each was skipped)."""

    def __init__(self):
        self.origins: dict[tuple[Hashable, int], list[Origin]] = {}
        self.skipped: dict[int, Skipped] = {}
        self.stage = ""

    def annotate(self, key, sharding: Sharding, label: str) -> None:
        sizes = tuple(sharding.mesh.shape.items())
        for d, dim in enumerate(sharding.dims):
            if dim.axes:
                origin = Origin(tuple(dim.axes), annotation=label, priority=dim.priority or 0, stage=self.stage, sizes=sizes)
                self._add(key, d, origin)

    def propagated(self, key, dim: int, axes: Sequence[AxisRef], node: int | None, op: str, factor: str | None, source, sizes) -> None:
        origin = Origin(tuple(axes), node=node, op=op, factor=factor, source=source, stage=self.stage, sizes=tuple(sizes.items()))
        self._add(key, dim, origin)

    def skip(self, node: int, op: str, reason: SkipReason) -> None:
        """Record that propagation skipped op ``node`` and why."""
        self.skipped[node] = Skipped(node, op, reason, self.stage)

    def _add(self, key, dim: int, origin: Origin) -> None:
        self.origins.setdefault((key, dim), []).append(origin)

    # -- reading --------------------------------------------------------------------------
    def find(self, key, dim: int, axis: AxisRef) -> Origin | None:
        for o in self.origins.get((key, dim), []):
            sizes = dict(o.sizes)
            if any(a.name == axis.name and am.overlaps(a, axis, sizes) for a in o.axes):
                return o
        return None

    def chain(self, key, dim: int, axis: AxisRef) -> tuple[Origin | None, list[Origin]]:
        """The root annotation of ``axis`` in ``(key, dim)`` and the propagation hops from the
        root to it (root side first)."""
        hops: list[Origin] = []
        seen = set()
        while (key, dim) not in seen:
            seen.add((key, dim))
            o = self.find(key, dim, axis)
            if o is None:
                return None, hops[::-1]
            if o.annotation is not None:
                return o, hops[::-1]
            hops.append(o)
            if o.source is None:
                return None, hops[::-1]
            key, dim = o.source
        return None, hops[::-1]

    def describe(self, key, dim: int, axis: AxisRef) -> str:
        root, hops = self.chain(key, dim, axis)
        if root is None and not hops:
            return "origin unknown"
        if root is not None and not hops:
            return f"annotated on {root.annotation} (p{root.priority})"
        text = f"from {root.annotation} (p{root.priority})" if root is not None else "from an unknown origin"
        text += " via " + " -> ".join(h.op for h in hops)
        last = hops[-1]
        if last.factor is not None and last.op != "return":
            text += f" factor {last.factor}"
        return text


def explain_value(prov: Provenance, key, sharding: Sharding | None, title: str) -> str:
    """``title: sharding`` then one line per dim saying where its axes came from."""
    lines = [f"{title}: {sharding if sharding is not None else 'no sharding'}"]
    if sharding is None:
        return "\n".join(lines)
    for d, dim in enumerate(sharding.dims):
        if not dim.axes:
            lines.append(f"  dim {d} {{}}: {'open' if dim.is_open else 'closed'}, no axes")
            continue
        groups: list[tuple[str, list[AxisRef]]] = []
        for a in dim.axes:
            why = prov.describe(key, d, a)
            if groups and groups[-1][0] == why:
                groups[-1][1].append(a)
            else:
                groups.append((why, [a]))
        axes_text = "{" + ", ".join(map(str, dim.axes)) + "}"
        if len(groups) == 1:
            lines.append(f"  dim {d} {axes_text}: {groups[0][0]}")
        else:
            parts = ["{" + ", ".join(map(str, axes)) + "} " + why for why, axes in groups]
            lines.append(f"  dim {d} {axes_text}: " + "; ".join(parts))
    return "\n".join(lines)
