"""The reshard planner's plan between two even tensor-dimension layouts, in closed form.

The search prices thousands of layout pairs; planning each (``partition.plan_reshard``, a few
milliseconds) would dominate it. Between the layouts the search uses (whole mesh axes, even
blocks) the planner's structured path takes these steps, in this order, and so does this model:

1. pending sums (``unreduced`` axes): reduce-scattered onto the dim the target shards with the
   axis, the others all-reduced together in one collective;
2. axes the target adds: a local slice, nothing moves;
3. axes that change dims: one all-to-all per axis, ``(g-1)/g`` of the block;
4. the same axes of a dim in another order, or a dim's major axis leaving while a minor one
   stays: a collective-permute of the block;
5. axes the target drops: one all-gather over all of them, ``G - 1`` blocks.

Each step is timed as the estimate times its record (``collectives.collective_seconds``,
``Topology.choice``: under NCCL the fastest of ring, tree and hierarchical), on the groups the
mesh forms over the step's axes, as ``costs.plan_seconds`` times the planner's steps. ``tests/autoshard/test_costs.py``
holds it equal to the planner's plan where that plan is one collective per axis. Elsewhere it is
a model of the plan, not the plan: where axes move between several dims at once the planner's
exchange may move fewer bytes (priced there on the slowest link), and relabelling steps may
differ. On a 2 x 4 mesh over shapes [8, 8] and [8, 16, 4], 156 of 168 layout pairs that differ in
one axis agree exactly, and 132 of 288 that differ in both (202 of these are upper bounds).
The search uses it beyond ``api.PLANNED_DEVICES`` devices, where planning every pair is too slow.
"""

from __future__ import annotations

import math

from ..report.topology import Topology
from ..sharding.dims import Sharding
from .collectives import Collective, collective_seconds, groups_to_time


def closed_form_seconds(src: Sharding, dst: Sharding, block: int, topology: Topology,
                        memo: dict | None = None) -> dict[tuple[str, ...], float]:
    """Seconds per link from ``src`` to ``dst`` for a tensor whose ``src`` block is ``block`` bytes.
    ``memo``: a dict kept across calls on one mesh and topology, remembering each collective's
    seconds (a search prices the same all-gather of the same block for many pairs of layouts)."""
    sizes = src.mesh.shape
    out: dict[tuple[str, ...], float] = {}
    memo = {} if memo is None else memo

    def step(kind, axes, nbytes, messages, minimum=None):
        """A collective over ``axes`` whose busiest device moves ``nbytes`` in ``messages`` and
        must receive ``minimum`` (``nbytes`` unless said)."""
        key = tuple(axes)
        minimum = nbytes if minimum is None else minimum
        known = (kind, key, nbytes, messages, minimum)
        seconds = memo.get(known)
        if seconds is None:
            groups = groups_to_time(topology, src.mesh.groups_over(key))
            seconds = memo[known] = collective_seconds(
                topology, (Collective(kind, key, g, nbytes, nbytes, messages, minimum) for g in groups))
        out[key] = out.get(key, 0.0) + seconds

    where_dst = {a.name: d for d, ds in enumerate(dst.dims) for a in ds.axes}
    where = {a.name: d for d, ds in enumerate(src.dims) for a in ds.axes}
    pending = [a.name for a in src.unreduced]
    scatter = [a for a in pending if a in where_dst]
    reduce = [a for a in pending if a not in where_dst]
    for a in scatter:
        g = sizes[a]
        step("reduce_scatter", (a,), block * (g - 1) / g, g - 1)
        block /= g
        where[a] = where_dst[a]
    if reduce:
        g = math.prod(sizes[a] for a in reduce)
        step("all_reduce", tuple(reduce), 2 * block * (g - 1) / g, 2 * (g - 1))
    for d, ds in enumerate(src.dims):  # a major axis leaving while a minor one stays: a relabel first
        names = [a.name for a in ds.axes]
        for k, a in enumerate(names):
            if where_dst.get(a) != d and any(where_dst.get(b) == d for b in names[k + 1:]):
                step("collective_permute", tuple(names), block, 1, 0)
                break
    sliced = [a for a in where_dst if a not in where]  # axes the target adds: sliced, in its order
    for a in sliced:
        block /= sizes[a]
        where[a] = where_dst[a]
    for a, d in list(where.items()):
        if a in where_dst and where_dst[a] != d:
            g = sizes[a]
            step("all_to_all", (a,), block * (g - 1) / g, g - 1)
            where[a] = where_dst[a]
    for d, ds in enumerate(dst.dims):
        want = [a.name for a in ds.axes]
        have = [a for a in _order(src, d, where, sliced, want) if a in want]
        if have != want and len(want) > 1:
            step("collective_permute", tuple(want), block, 1, 0)
    gone = [a for a in where if a not in where_dst]
    if gone:
        g = math.prod(sizes[a] for a in gone)
        step("all_gather", tuple(sorted(gone, key=src.mesh.axis_names.index)), block * (g - 1), g - 1)
    return out


def _order(src: Sharding, d: int, where: dict[str, int], sliced: list[str], want: list[str]) -> list[str]:
    """The axes on dim ``d`` after the moves: the source's own first, in its order, then the rest
    in mesh order; where the rest were all added by a local slice (``sliced``), in the order the
    target wants them (``want``): the planner slices each device's block in that order at once,
    moving nothing (from a dim held whole, ``{}`` to ``{"z", "y"}`` is a slice, not a permute)."""
    own = [a.name for a in src.dims[d].axes] if d < len(src.dims) else []
    rest = [a for a in src.mesh.axis_names if where.get(a) == d and a not in own]
    if rest and set(rest) <= set(sliced):
        rest.sort(key=lambda a: want.index(a) if a in want else len(want))
    return [a for a in own if where.get(a) == d] + rest
