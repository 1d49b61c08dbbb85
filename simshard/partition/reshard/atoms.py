"""Atoms: the pieces of mesh axes a reshard plan moves, and the device groups they span.

Two shardings of one tensor may name an axis whole in one and as sub-axes in the other
(``"x"`` versus ``"x":(1)2, "x":(2)2``). To compare them position by position the planner cuts
every axis at all the boundaries either sharding uses, and further into prime factors, so that
pieces of equal size on different axes can be exchanged for one another (Shardy's
"decompose axes into sub-axes so a permute + all-to-all suffice"). Each piece is an *atom*: an
``AxisRef`` (a full axis when it is whole). A sharding becomes a ``State``: per dimension its
atoms major to minor, plus the atoms it holds pending reductions over.

Device groups of a list of atoms are the devices that differ only in those atoms' coordinates,
each group ordered by the mixed-radix number the atoms' digits form in the order given.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from ...sharding.axes import AxisRef, canonical_ref, merge_adjacent
from ...sharding.mesh import Mesh
from ...sharding.dims import DimSharding, Sharding

Atom = AxisRef


def _primes(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def refine(mesh: Mesh, shardings: Iterable[Sharding]) -> dict[str, tuple[Atom, ...]] | None:
    """Per mesh axis, its atoms major to minor, cut at every boundary the shardings use and into
    primes; None when two shardings split one axis incompatibly (e.g. ``x:(1)2`` and ``x:(1)3``
    of an axis of 6)."""
    bounds: dict[str, set[int]] = {n: {1, s} for n, s in zip(mesh.axis_names, mesh.axis_sizes)}
    for s in shardings:
        for ref in _refs(s):
            lo, hi = ref.interval(mesh.shape[ref.name])
            bounds[ref.name].update((lo, hi))
    out = {}
    for name, bs in bounds.items():
        chain = sorted(bs)
        if any(b % a for a, b in zip(chain, chain[1:])):
            return None
        atoms = []
        n = mesh.shape[name]
        for lo, hi in zip(chain, chain[1:]):
            pre = lo
            for p in _primes(hi // lo):
                atoms.append(canonical_ref(name, pre, p, n))
                pre *= p
        out[name] = tuple(atoms)
    return out


def _refs(s: Sharding) -> list[AxisRef]:
    return [a for d in s.dims for a in d.axes] + list(s.unreduced)


def atoms_of(ref: AxisRef, mesh: Mesh, table: dict[str, tuple[Atom, ...]]) -> tuple[Atom, ...]:
    n = mesh.shape[ref.name]
    lo, hi = ref.interval(n)
    return tuple(a for a in table[ref.name] if lo <= a.pre_size() < hi)


@dataclass(frozen=True)
class State:
    """A sharding seen as atoms: per dim the atoms major to minor; pending atoms and their op."""

    dims: tuple[tuple[Atom, ...], ...]
    unreduced: frozenset[Atom] = frozenset()
    reduce_op: str = "sum"

    @staticmethod
    def of(s: Sharding, table: dict[str, tuple[Atom, ...]]) -> "State":
        mesh = s.mesh
        dims = tuple(tuple(a for ref in d.axes for a in atoms_of(ref, mesh, table)) for d in s.dims)
        unr = frozenset(a for ref in s.unreduced for a in atoms_of(ref, mesh, table))
        return State(dims, unr, s.reduce_op if unr else "sum")

    def sharding(self, mesh: Mesh) -> Sharding:
        return sharding_of(self, mesh)

    def used(self) -> set[Atom]:
        return {a for d in self.dims for a in d} | set(self.unreduced)

    def where(self, atom: Atom) -> tuple[int, int] | None:
        for i, d in enumerate(self.dims):
            if atom in d:
                return i, d.index(atom)
        return None

    def with_dims(self, dims) -> "State":
        return State(tuple(tuple(d) for d in dims), self.unreduced, self.reduce_op)

    def with_unreduced(self, unr, op=None) -> "State":
        unr = frozenset(unr)
        return State(self.dims, unr, (op or self.reduce_op) if unr else "sum")


@lru_cache(maxsize=65536)
def sharding_of(state: State, mesh: Mesh) -> Sharding:
    """The sharding a state of atoms writes (remembered: a planner's walks pass through the same
    states over and over, and a ``Sharding`` checks every axis it is made with). Atoms are the
    pieces of a split axis: neighbours that make up a bigger sub-axis are written as that one (a
    Sharding refuses non-maximal sub-axes)."""
    sizes = mesh.shape
    return Sharding(mesh, tuple(DimSharding(merge_adjacent(d, sizes)) for d in state.dims), (),
                    merge_adjacent(sorted_atoms(state.unreduced, mesh), sizes),
                    state.reduce_op if state.unreduced else "sum")


def sorted_atoms(atoms: Iterable[Atom], mesh: Mesh) -> list[Atom]:
    """Atoms in canonical order: mesh axis order, then major to minor."""
    order = {n: i for i, n in enumerate(mesh.axis_names)}
    return sorted(atoms, key=lambda a: (order[a.name], a.pre_size()))


def atom_groups(mesh: Mesh, atoms: tuple[Atom, ...]) -> tuple[tuple[int, ...], ...]:
    """Devices differing only in ``atoms``' coordinates; each group ordered by the atoms' digits
    read as one number, first atom most significant (``Mesh.groups_over``)."""
    return mesh.groups_over(atoms)

