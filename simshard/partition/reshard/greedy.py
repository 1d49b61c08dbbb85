"""The structured reshard: which collective to run next, decided on atoms (Shardy's
reshard-to-collectives loop, extended with pending reductions).

``next_move(current, target)`` looks at the current state and the target (both ``State``s on one
mesh) and proposes one step, in this order of preference:

1. **reduce**: pending atoms the target does not keep. Atoms the target shards a dim with are
   reduce-scattered onto that dim (first those landing in their final place, as maximal runs),
   the rest all-reduced together in one collective (an average over a group whose size is not
   a power of two is always one all-reduce: averaging averages rounds differently);
2. **slice** (local): free atoms the target wants next on a dim whose current atoms are a prefix
   of the target's; before anything else moves, so data only ever shrinks first;
3. **embed** (local): atoms the target holds pending, at the minor end of a dim: each device puts
   its block into an identity-filled block of the bigger shape (the one step whose shard may
   outgrow both ends: ``[{x}] -> [{y}] unreduced={x}`` embeds to the whole dim, then slices);
4. **all-to-all**: a suffix of a dim's atoms that the target wants next on another dim;
5. **collective-permute**: relabel devices, replacing (or swapping) atoms with same-size atoms
   the target wants at those positions; before any gather, while shards are small;
6. **all-gather**: trailing atoms of a dim the target does not want there;
7. **unreduce** (local): atoms the target holds pending that are free: all devices but the first
   of each group replace their contribution with the reduction's identity.

Moves are proposals: the caller checks each against the layouts (uneven dims may not nest) and
may ban a move, asking for the next one.

Reductions combine contributions in group order; groups are in ascending mesh coordinate except
for a reduce-scatter that hands out chunks in the order the target dim lists its axes. Sums of
exact values are exact in any order; an average reduced over some axes while others stay
pending divides in two steps, which for group sizes that are not powers of two rounds
differently from one average over all contributions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ...sharding.mesh import Mesh
from .atoms import Atom, State, sorted_atoms


@dataclass(frozen=True)
class Move:
    """One proposed step: its collective (or local) ``kind``, the state it leads to and the atoms it moves."""

    kind: str
    after: State
    atoms: tuple[Atom, ...] = ()
    dim: int | None = None  # slice: dims changed; gather / reduce_scatter / embed: the dim; all_to_all: source dim
    tgt_dim: int | None = None  # all_to_all: the dim the atoms move to
    info: Any = field(default=None, compare=False)

    @property
    def signature(self) -> tuple:
        return (self.kind, self.atoms, self.dim, self.tgt_dim)


def _prefix(a, b) -> bool:
    return len(a) <= len(b) and tuple(b[: len(a)]) == tuple(a)


def _common(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def pending_plan(current: State, target: State) -> tuple[set[Atom], set[Atom]]:
    """(atoms to reduce, atoms to create pending)."""
    if current.unreduced and target.unreduced and current.reduce_op != target.reduce_op:
        return set(current.unreduced), set(target.unreduced)
    return set(current.unreduced) - set(target.unreduced), set(target.unreduced) - set(current.unreduced)


def next_move(current: State, target: State, mesh: Mesh, banned: frozenset = frozenset()) -> Move | None:
    """The next step from ``current`` towards ``target``; None when ``current == target`` or nothing applies."""
    if current == target:
        return None
    size = mesh.axis_size
    reducing, create = pending_plan(current, target)
    used = current.used()
    ok = functools.partial(_allowed, banned=banned)
    # 1. reductions (with slices first: a reduction of sliced data moves less)
    if reducing:
        return ok(_slice(current, target, used, create, size)) or _reduce_move(current, target, mesh, reducing, ok)
    # 2. slice
    m = ok(_slice(current, target, used, create, size))
    if m:
        return m
    mism = [i for i in range(len(current.dims)) if not _prefix(current.dims[i], target.dims[i])]
    return (_embed_move(current, target, mism, create, ok)  # 3. target-pending atoms at the minor end of a dim
            or _all_to_all_move(current, target, mism, banned)  # 4. a suffix of a dim that another dim wants next
            or ok(_permute(current, target, mesh, used))  # 5. same-size replacements / swaps at mismatched positions
            or _gather_move(current, target, mism, create, ok)  # 6. trailing atoms
            or _unreduce_move(current, target, mesh, create, used, ok))  # 7. target-pending atoms that are free


def _allowed(m: Move | None, banned: frozenset) -> Move | None:
    """``m`` unless it is missing or banned."""
    return m if m is not None and m.signature not in banned else None


def _reduce_move(current: State, target: State, mesh: Mesh, reducing: set[Atom], ok) -> Move | None:
    """A reduction of the pending atoms ``reducing``: reduce-scatters onto the target's dims first."""
    size = mesh.axis_size
    nd = len(current.dims)
    # An average over a group whose size is not a power of two must be taken in one
    # collective: an average of averages divides twice and rounds differently.
    g = 1
    for a in reducing:
        g *= size(a)
    if current.reduce_op == "avg" and g & (g - 1):
        return ok(Move("all_reduce", current.with_unreduced(set(current.unreduced) - reducing), tuple(sorted_atoms(reducing, mesh))))
    # reduce-scatter runs landing in their final place
    for j in range(nd):
        if not _prefix(current.dims[j], target.dims[j]):
            continue
        run = []
        for a in target.dims[j][len(current.dims[j]):]:
            if a in reducing:
                run.append(a)
            else:
                break
        if run:
            m = ok(_reduce_scatter(current, j, tuple(run)))
            if m:
                return m
    # reduce-scatter onto the dim the target wants them on (fixed up later)
    for j in range(nd):
        run = tuple(a for a in target.dims[j] if a in reducing)
        if run:
            m = ok(_reduce_scatter(current, j, run))
            if m:
                return m
    rest = tuple(sorted_atoms(reducing, mesh))
    after = current.with_unreduced(set(current.unreduced) - reducing)
    return ok(Move("all_reduce", after, rest))


def _embed_move(current: State, target: State, mism: list[int], create: set[Atom], ok) -> Move | None:
    """Embed: atoms the target holds pending, at the minor end of a mismatched dim."""
    for i in mism:
        run = []
        for a in reversed(current.dims[i]):
            if a in create:
                run.insert(0, a)
            else:
                break
        if run and len(current.dims[i]) - len(run) >= _common(current.dims[i], target.dims[i]):
            dims = list(current.dims)
            dims[i] = current.dims[i][: len(current.dims[i]) - len(run)]
            after = State(tuple(dims), frozenset(set(current.unreduced) | set(run)), target.reduce_op)
            m = ok(Move("embed", after, tuple(run), dim=i))
            if m:
                return m
    return None


def _all_to_all_move(current: State, target: State, mism: list[int], banned: frozenset) -> Move | None:
    """All-to-all: the longest suffix of a mismatched dim that another dim wants next."""
    best = None
    for i in mism:
        p = _common(current.dims[i], target.dims[i])
        x = current.dims[i][p:]
        for j in range(len(current.dims)):
            if j == i or not _prefix(current.dims[j], target.dims[j]):
                continue
            want = target.dims[j][len(current.dims[j]):]
            for k in range(len(x), 0, -1):
                suffix = x[len(x) - k:]
                if tuple(want[:k]) == tuple(suffix):
                    dims = list(current.dims)
                    dims[i] = current.dims[i][: len(current.dims[i]) - k]
                    dims[j] = current.dims[j] + suffix
                    cand = Move("all_to_all", current.with_dims(dims), tuple(suffix), dim=i, tgt_dim=j)
                    if cand.signature not in banned and (best is None or len(suffix) > len(best.atoms)):
                        best = cand
                    break
    return best


def _gather_move(current: State, target: State, mism: list[int], create: set[Atom], ok) -> Move | None:
    """All-gather the trailing atoms of a mismatched dim that the target does not want (at least one)."""
    wanted = {a for d in target.dims for a in d}
    for i in mism:
        p = _common(current.dims[i], target.dims[i])
        x = current.dims[i][p:]
        k = 0
        while k < len(x) and x[len(x) - 1 - k] not in wanted and x[len(x) - 1 - k] not in create:
            k += 1
        if k == 0:
            k = 1
        suffix = x[len(x) - k:]
        dims = list(current.dims)
        dims[i] = current.dims[i][: len(current.dims[i]) - k]
        m = ok(Move("all_gather", current.with_dims(dims), tuple(suffix), dim=i))
        if m:
            return m
    return None


def _unreduce_move(current: State, target: State, mesh: Mesh, create: set[Atom], used, ok) -> Move | None:
    """Unreduce: atoms the target holds pending that no dim uses, once the dims agree."""
    if current.dims == target.dims and create:
        free = tuple(sorted_atoms([a for a in create if a not in used], mesh))
        if free:
            after = State(current.dims, frozenset(set(current.unreduced) | set(free)), target.reduce_op)
            return ok(Move("unreduce", after, free))
    return None


def _slice(current: State, target: State, used: set, create: set, size=None) -> Move | None:
    """Free atoms the target wants next on a dim. A dim whose current atoms are not a prefix of the
    target's still gets them when every mismatched atom has the size of the target's atom at its
    position (a relabelling will fix those later, on the smaller shard)."""
    dims = [list(d) for d in current.dims]
    taken: list[Atom] = []
    changed = []
    for j in range(len(dims)):
        if not _prefix(dims[j], target.dims[j]):
            p = _common(dims[j], target.dims[j])
            if size is None or len(dims[j]) > len(target.dims[j]):
                continue
            if any(size(dims[j][q]) != size(target.dims[j][q]) for q in range(p, len(dims[j]))):
                continue
        for a in target.dims[j][len(dims[j]):]:
            if a in used or a in taken:
                break
            dims[j].append(a)
            taken.append(a)
            if j not in changed:
                changed.append(j)
    if not taken:
        return None
    return Move("slice", current.with_dims(dims), tuple(taken), dim=tuple(changed))


def _reduce_scatter(current: State, j: int, run: tuple[Atom, ...]) -> Move:
    dims = list(current.dims)
    dims[j] = current.dims[j] + run
    after = State(tuple(dims), frozenset(set(current.unreduced) - set(run)), current.reduce_op)
    if not after.unreduced:
        after = State(after.dims, frozenset(), "sum")
    return Move("reduce_scatter", after, run, dim=j)


def _permute(current: State, target: State, mesh: Mesh, used: set) -> Move | None:
    size = mesh.axis_size
    dims = [list(d) for d in current.dims]
    changed = False
    for i in range(len(dims)):
        p = _common(dims[i], target.dims[i])
        for q in range(p, min(len(dims[i]), len(target.dims[i]))):
            a, b = dims[i][q], target.dims[i][q]
            if a == b:
                continue
            if size(a) != size(b):
                break
            cur = {x for d in dims for x in d} | set(current.unreduced)
            if b not in cur:
                dims[i][q] = b
                changed = True
                continue
            loc = next(((j, r) for j, d in enumerate(dims) for r, x in enumerate(d) if x == b), None)
            if loc is None:
                break
            j, r = loc
            if r < _common(dims[j], target.dims[j]):
                break
            dims[j][r] = a
            dims[i][q] = b
            changed = True
    if not changed:
        return None
    old = {(i, q, a) for i, d in enumerate(current.dims) for q, a in enumerate(d)}
    new = {(i, q, a) for i, d in enumerate(dims) for q, a in enumerate(d)}
    moved = tuple(sorted_atoms({a for _, _, a in old ^ new}, mesh))
    return Move("collective_permute", current.with_dims(dims), moved)
