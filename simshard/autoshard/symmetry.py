"""Permutations of a mesh's axes that change no reshard's price, so that the search plans one pair
of layouts per orbit instead of every pair.

On a mesh whose axes ``x``, ``y`` and ``z`` have one size and one link, with no node layout to
place groups on (``Topology.nodes``), a reshard from ``s`` to ``t`` costs what the same reshard
with the axes renamed costs: the planner's collectives run over groups of the same sizes on the
same links. ``tiny``'s training step over 2 x 2 x 2 plans about 148,000 pairs, one planner call
each (about 150 s of CPU); under the six renamings of three equal axes most of those pairs are
renamings of one another. ``Symmetry`` finds the renamings (``of``), names each pair's orbit by
its least renamed form (``canonical``), renames layouts (``renamed``) and the mesh axes a price is
charged to back (``axes_back``). Whether the planner really is blind to the names is checked by
execution, pair by pair, in ``tests/autoshard/test_symmetry.py``; only the planned prices use this
(the closed form orders axes by the mesh's order, and is left as it is).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import NamedTuple

from ..report.topology import Topology
from ..sharding.dims import AxisRef, Sharding
from ..sharding.mesh import Mesh


class Canonical(NamedTuple):
    """A pair's orbit: its least renamed form (a key) and the renaming that takes it there."""

    key: tuple
    renaming: dict[str, str]


def of(mesh: Mesh, topology: Topology) -> tuple[dict[str, str], ...]:
    """The renamings of ``mesh``'s axes (other than none) that keep every axis's size, type and
    link; none where the topology places groups on nodes (a group's nodes then depend on which
    axes it spans)."""
    if topology.nodes is not None:
        return ()
    names = mesh.axis_names
    traits = {a: (mesh.shape[a], mesh.axis_types[i], _link(topology, a)) for i, a in enumerate(names)}
    out = []
    for order in itertools.permutations(names):
        renaming = dict(zip(names, order))
        if order != names and all(traits[a] == traits[b] for a, b in renaming.items()):
            out.append(renaming)
    return tuple(out)


def _link(topology: Topology, axis: str):
    try:
        return topology.link((axis,))
    except KeyError:  # no link for it: it shares its (missing) link with no other axis
        return axis


def _refs(refs, renaming: dict[str, str]) -> tuple[AxisRef, ...]:
    return tuple(AxisRef(renaming[a.name], a.sub) for a in refs)


def renamed(s: Sharding, renaming: dict[str, str]) -> Sharding:
    """``s`` with each mesh axis ``a`` named ``renaming[a]`` (a sub-axis keeps its part)."""
    return replace(s, dims=tuple(replace(d, axes=_refs(d.axes, renaming)) for d in s.dims),
                   replicated=_refs(s.replicated, renaming), unreduced=_refs(s.unreduced, renaming))


def _key(s: Sharding, renaming: dict[str, str], order: dict[str, int]) -> tuple:
    """``renamed(s, renaming)``'s structure, comparable, without building it (the replicated and
    pending axes in the mesh's order, as a ``Sharding`` keeps them)."""
    ref = lambda a: (order[renaming[a.name]], "" if a.sub is None else str(a.sub))
    return (tuple((tuple(ref(a) for a in d.axes), d.is_open, -1 if d.priority is None else d.priority) for d in s.dims),
            tuple(sorted(ref(a) for a in s.replicated)), tuple(sorted(ref(a) for a in s.unreduced)), s.reduce_op)


def keys(s: Sharding, renamings: tuple[dict[str, str], ...]) -> tuple[tuple, ...]:
    """``s``'s structure as it is and under each of ``renamings``, in that order: what
    ``canonical`` compares (a search keeps them per layout: each is in thousands of pairs)."""
    order = {a: i for i, a in enumerate(s.mesh.axis_names)}
    return tuple(_key(s, renaming, order) for renaming in _with_none(s.mesh, renamings))


def _with_none(mesh: Mesh, renamings: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
    """No renaming, then ``renamings``: the forms ``keys`` makes and ``canonical`` compares."""
    return ({a: a for a in mesh.axis_names},) + renamings


def canonical(src: Sharding, dst: Sharding, renamings: tuple[dict[str, str], ...],
              src_keys: tuple[tuple, ...] | None = None, dst_keys: tuple[tuple, ...] | None = None) -> Canonical:
    """The pair's orbit under ``renamings`` (and none): the least of its renamed forms.
    ``src_keys``, ``dst_keys``: the layouts' ``keys``, where the caller has them."""
    src_keys = keys(src, renamings) if src_keys is None else src_keys
    dst_keys = keys(dst, renamings) if dst_keys is None else dst_keys
    best = None
    for renaming, a, b in zip(_with_none(src.mesh, renamings), src_keys, dst_keys):
        key = (a, b)
        if best is None or key < best.key:
            best = Canonical(key, renaming)
    return best


def in_mesh_order(axes, mesh: Mesh) -> tuple[str, ...]:
    """Mesh axes (a sub-axis as ``"y:(2)2"``) in the mesh's order: the set a price is charged to."""
    order = {a: i for i, a in enumerate(mesh.axis_names)}
    return tuple(sorted(axes, key=lambda a: (order[a.partition(":")[0]], a)))


def axes_back(axes: tuple[str, ...], renaming: dict[str, str], mesh: Mesh) -> tuple[str, ...]:
    """Mesh axes a renamed pair's price is charged to, named as the pair before its renaming (a
    sub-axis keeps its part), in the mesh's order."""
    back = {b: a for a, b in renaming.items()}
    return in_mesh_order([back[name] + colon + part for name, colon, part in (a.partition(":") for a in axes)], mesh)
