"""The exchange: any layout to any layout, each device receiving exactly what it lacks.

Every device's target block is cut into *cells*: along each dim, maximal runs of consecutive
local positions whose global indices are held by the same set of source blocks; a cell is a
product of runs, so some single device holds all of it. A device keeps the cells it holds itself
and receives every other cell from one holder (the least loaded one, among devices holding the
same contribution when a pending reduction is carried along). The received bytes are therefore
exactly the elements of the new block the device did not have: the lower bound for any plan.

Transfers are point-to-point, grouped into rounds in which every device sends at most one cell
and receives at most one (a bipartite edge colouring with as many rounds as the busiest device
has transfers); each round is one ``CollectivePermute``. The block is assembled with
``dynamic_update_slice`` into a zero block of the target's local shape. Every device emits the
same instructions (devices with fewer cells slice empty pieces), so schedules stay SPMD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .plan import Step, block_size, common_count, layout_of
from .realize import as_positions, contribution_class, positions
from .schedule import CollectivePermute, Compute, Literal, Slice


@dataclass(frozen=True, eq=False)
class ExchangeData:
    rank: int
    shapes: dict  # device -> its target block's local shape
    local: dict  # device -> [(source positions per dim, starts per dim)]
    rounds: tuple  # per round: {target: (source, source positions per dim, starts per dim)}


def plan_exchange(before, after, shape, itemsize: int) -> Step | None:
    """The exchange step from ``before`` to ``after`` (None if some element has no holder)."""
    shape = tuple(shape)
    L, L2 = layout_of(before, shape), layout_of(after, shape)
    devices = L2.devices
    if set(devices) != set(L.devices):
        return None
    rank = len(shape)
    src_devs = np.array(L.devices)
    # per dim: which distinct source arrays hold each global index, as a signature id
    arrid, sid, member = [], [], []
    for k in range(rank):
        keys: dict[bytes, int] = {}
        ids = []
        arrays = []
        for s in L.devices:
            ix = L.index_map[s][k]
            key = ix.tobytes()
            if key not in keys:
                keys[key] = len(arrays)
                arrays.append(ix)
            ids.append(keys[key])
        M = np.zeros((len(arrays), shape[k]), dtype=bool)
        for a, ix in enumerate(arrays):
            M[a, ix] = True
        sig, inv = np.unique(M.T, axis=0, return_inverse=True) if shape[k] else (np.zeros((0, len(arrays)), bool), np.zeros(0, np.intp))
        arrid.append(np.array(ids))
        sid.append(np.asarray(inv).reshape(-1))
        member.append(sig)
    cls_src = [contribution_class(L, s) for s in L.devices]
    bases: dict[tuple, np.ndarray] = {}  # per contribution class: the sources of that class
    holders: dict[tuple, tuple] = {}  # per (class, cell): which sources hold the cell (mask, positions)
    placed: dict[tuple, range | tuple] = {}  # positions of a target run in a source block, by arrays
    cut: dict[int, tuple] = {}  # per target block: its runs of elements with one set of holders, per dim
    load = np.zeros(len(src_devs), dtype=np.int64)  # elements each source sends, by position
    row = {int(s): k for k, s in enumerate(src_devs)}  # device -> its position in src_devs
    local: dict[int, list] = {d: [] for d in devices}
    edges: list[tuple[int, int, tuple, tuple, int]] = []  # (source, target, positions, starts, elements)
    for d in devices:
        cls = contribution_class(L2, d)
        if cls not in bases:
            bases[cls] = np.array([c == cls for c in cls_src])
        base = bases[cls]
        block = L2.index_map[d]
        if id(block) not in cut:  # devices holding one block share its tuple of index arrays
            cut[id(block)] = (block, _runs(block, sid))
        runs = cut[id(block)][1]
        if runs is None:
            continue
        for cell in _product(runs):
            key = (cls, tuple(s for _, _, s in cell))
            if key not in holders:
                ok = base.copy()
                for k, (a, b, s) in enumerate(cell):
                    ok &= member[k][s][arrid[k]]
                holders[key] = (ok, np.flatnonzero(ok))
            ok, cands = holders[key]
            if len(cands) == 0:
                return None
            if ok[row[d]]:
                src = d
            else:  # the least-loaded holder, the first after d (cyclically) among equals
                least = cands[load[cands] == load[cands].min()]
                src = int(src_devs[least[np.argmin((src_devs[least] - d) % len(devices))]])
            n = math.prod(b - a for a, b, _ in cell)
            pos = []
            for k, (a, b, _) in enumerate(cell):
                outer, inner = L.index_map[src][k], L2.index_map[d][k]
                at = (id(outer), id(inner), a, b)  # layouts share index arrays between devices
                if at not in placed:
                    placed[at] = as_positions(positions(outer, inner[a:b]))
                pos.append(placed[at])
            starts = tuple(a for a, _, _ in cell)
            if src == d:
                local[d].append((tuple(pos), starts))
            else:
                load[row[src]] += n
                edges.append((src, d, tuple(pos), starts, n))
    colors = _edge_colouring([(s, t) for s, t, *_ in edges])
    nrounds = max(colors, default=-1) + 1
    rounds: list[dict] = [{} for _ in range(nrounds)]
    sent = {d: 0 for d in devices}
    rec = {d: 0 for d in devices}
    for (s, t, pos, starts, n), c in zip(edges, colors):
        rounds[c][t] = (s, pos, starts)
        sent[s] += n * itemsize
        rec[t] += n * itemsize
    minimum = {}
    for d in devices:
        have = math.prod(common_count(a, b) for a, b in zip(L2.index_map[d], L.index_map[d])) if rank else 1
        if contribution_class(L2, d) != contribution_class(L, d):
            have = 0
        minimum[d] = (block_size(L2, d) - have) * itemsize
    data = ExchangeData(rank, {d: L2.local_shape(d) for d in devices}, local, tuple(rounds))
    return Step("exchange", before, after, shape, itemsize, (), (), sent=sent, received=rec, minimum=minimum, data=data)


def _runs(block, sid) -> list | None:
    """Per dim, the runs ``(start, end, signature)`` of a target block's indices whose holders
    are the same (None for an empty block)."""
    runs = []
    for k, I in enumerate(block):
        if len(I) == 0:
            return None
        s_ids = sid[k][I]
        cuts = np.flatnonzero(np.diff(s_ids)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(I)]])
        runs.append([(int(a), int(b), int(s_ids[a])) for a, b in zip(starts, ends)])
    return runs


def _product(runs):
    if not runs:
        yield ()
        return
    first, rest = runs[0], runs[1:]
    for r in first:
        for tail in _product(rest):
            yield (r,) + tail


def _edge_colouring(edges: list[tuple[int, int]]) -> list[int]:
    """Colour the edges of a bipartite multigraph (senders x receivers) with as many colours as
    the largest degree (Koenig), flipping alternating paths when both ends' free colours differ."""
    at_s: dict[int, dict[int, int]] = {}  # sender -> colour -> edge index
    at_t: dict[int, dict[int, int]] = {}
    low: dict[tuple[str, int], int] = {}  # per node: no colour below this one is free
    colour = [-1] * len(edges)

    def free(m: dict[int, int], node: tuple[str, int]) -> int:
        c = low.get(node, 0)
        while c in m:
            c += 1
        low[node] = c
        return c

    def release(node: tuple[str, int], c: int) -> None:
        if c < low.get(node, 0):
            low[node] = c

    for e, (s, t) in enumerate(edges):
        ms, mt = at_s.setdefault(s, {}), at_t.setdefault(t, {})
        a, b = free(ms, ("s", s)), free(mt, ("t", t))
        if a not in mt:
            c = a
        elif b not in ms:
            c = b
        else:
            # alternating a/b path from t: t -a- s1 -b- t1 -a- ...; swap a and b along it
            path = []
            node, side, want = t, "t", a
            while True:
                m = at_t[node] if side == "t" else at_s[node]
                if want not in m:
                    break
                f = m[want]
                path.append(f)
                fs, ft = edges[f]
                node, side = (fs, "s") if side == "t" else (ft, "t")
                want = b if want == a else a
            for f in path:
                fs, ft = edges[f]
                old = colour[f]
                del at_s[fs][old]
                del at_t[ft][old]
                release(("s", fs), old)
                release(("t", ft), old)
            for f in path:
                fs, ft = edges[f]
                new = b if colour[f] == a else a
                colour[f] = new
                at_s[fs][new] = f
                at_t[ft][new] = f
            c = a
        colour[e] = c
        ms[c] = e
        mt[c] = e
    return colour


def emit_exchange(step: Step, b, src: int, dtype: np.dtype, source: str) -> int:
    data: ExchangeData = step.data
    rank = data.rank
    empty = (range(0),) * rank
    acc = b.buf()
    zero = dtype.type(0)
    # devices share an instruction wherever theirs would be equal (its key): the estimate then
    # walks them as one class
    b.emit_by(lambda d: tuple(data.shapes[d]), lambda d: Compute(
        0, source, op="full", inputs=(), outputs=(acc,), params=(("shape", tuple(data.shapes[d])), ("fill_value", zero),
                                                                ("dtype", dtype))))

    def update(acc: int, piece: int, starts: dict) -> int:
        """Write ``piece`` into ``acc`` at each device's ``starts`` (zeros for devices not listed)."""
        sbufs = b.bufs(rank)
        for k in range(rank):
            b.emit_keyed({d: s[k] for d, s in starts.items()}, 0,
                         lambda v, k=k: Literal(0, source, dst=sbufs[k], value=np.int32(v)))
        out = b.buf()
        b.emit_same(Compute(0, source, op="dynamic_update_slice", inputs=(acc, piece) + sbufs, outputs=(out,)))
        return out

    nlocal = max((len(v) for v in data.local.values()), default=0)
    for slot in range(nlocal):
        piece = b.buf()
        cells = {d: c[slot] for d, c in data.local.items() if slot < len(c)}  # (positions, starts)
        b.emit_keyed({d: pos for d, (pos, _) in cells.items()}, empty, lambda pos: Slice(0, source, src=src, dst=piece, index=pos))
        acc = update(acc, piece, {d: starts for d, (_, starts) in cells.items()})
    mesh = step.after_layout().mesh
    for rnd in data.rounds:
        sends = {s: pos for t, (s, pos, _) in rnd.items()}
        pairs = tuple(sorted(((s, t) for t, (s, _, _) in rnd.items()), key=lambda p: p[1]))
        axes = _pair_axes(mesh, pairs)
        out, inb = b.buf(), b.buf()
        b.emit_keyed(sends, empty, lambda pos: Slice(0, source, src=src, dst=out, index=pos))
        b.emit_same(CollectivePermute(0, source, src=out, dst=inb, pairs=pairs, shape=(0,) * rank, dtype=dtype.name, axes=axes))
        acc = update(acc, inb, {t: starts for t, (_, _, starts) in rnd.items()})
    return acc


def _pair_axes(mesh, pairs) -> tuple[str, ...]:
    """The mesh axes a round's transfers cross: those along which some pair's coordinates differ
    (what the communication report and the time estimate charge the round to)."""
    if not pairs:
        return ()
    pos = mesh._position
    s = np.array([pos[a] for a, _ in pairs])
    t = np.array([pos[b] for _, b in pairs])
    return tuple(n for n in mesh.axis_names if bool(np.any(mesh.axis_indices(n)[s] != mesh.axis_indices(n)[t])))
