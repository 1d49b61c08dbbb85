"""The exchange's transfers grouped into rounds (each round one collective-permute).

Every device sends at most one cell and receives at most one per round: a bipartite edge
colouring with as many rounds as the busiest device has transfers (``edge_colouring``), or,
where a few devices hold what many lack (a broadcast), rounds in which a device that has
received a cell passes it on (``relayed_rounds``), so copies double each round. A want is a
device (``target``) lacking a ``cell`` (``exchange``'s wants); a ``Transfer`` sends a want's cell.

Each want is given its source first (``least_loaded``); the bytes each device sends and the number
of rounds follow from that choice alone where no cell is relayed (the colouring has exactly as
many rounds as the busiest device has transfers, Koenig), so an exchange can be priced without
colouring its transfers (``deferred``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np


class CellHolders(NamedTuple):
    """The source devices holding a cell: as a mask over the sources, and their ids."""

    mask: np.ndarray
    devices: np.ndarray


class Transfer(NamedTuple):
    """One transfer of a round: ``source`` sends ``want``'s cell, from its source block, or from
    the block it assembles when ``copy`` (its own copy of the cell, received in an earlier round)."""

    source: int
    copy: Any
    want: Any


def relayed_rounds(wants: list, holders: dict) -> list[list[Transfer]]:
    """Rounds of transfers ``(source, the source's own copy or None, want)`` in which every device
    sends at most one cell and receives at most one, and a device that has received a cell may
    pass it on (from its own copy) in later rounds: a cell held by one device and wanted by m
    others takes about log2(m) rounds rather than m. Greedy by rounds: each round serves first
    the cells with the most wanting devices per holder, and each cell first the devices that
    have received the fewest cells (each becomes a new sender of it, rather than one device
    holding many cells but able to send one per round)."""
    by_cell: dict[tuple, list[int]] = {}  # the wants of each cell (indices into wants)
    for i, w in enumerate(wants):
        by_cell.setdefault(w.cell.elements, []).append(i)
    target = np.array([w.target for w in wants], dtype=np.int64)
    top = int(max(target.max(), max(int(holders[key].devices.max()) for key in {w.cell.holders for w in wants}))) + 1
    pending = {e: np.array(ix, dtype=np.int64) for e, ix in by_cell.items()}
    # who can send each cell: devices, and each one's own copy (a cell of the block it assembles,
    # or None for a device holding it in its source block)
    senders = {e: [int(s) for s in holders[wants[ix[0]].cell.holders].devices] for e, ix in by_cell.items()}
    copies = {e: [None] * len(senders[e]) for e in by_cell}
    held = np.zeros(top, dtype=np.int64)  # cells each device has received so far
    served = np.zeros(len(wants), dtype=bool)  # the wants given a transfer
    rounds: list[list[tuple]] = []
    while pending:
        sending = np.zeros(top, dtype=bool)
        receiving = np.zeros(top, dtype=bool)
        moves = []
        for e in sorted(pending, key=lambda e: -len(pending[e]) / len(senders[e])):
            queue, who = pending[e], np.array(senders[e])
            free = np.flatnonzero(~sending[who])
            ready = queue[~receiving[target[queue]]]
            ready = ready[np.argsort(held[target[ready]], kind="stable")][:len(free)]
            if not len(ready):
                continue
            for h, i in zip(free[:len(ready)].tolist(), ready.tolist()):
                moves.append(Transfer(senders[e][h], copies[e][h], wants[i]))
            sending[who[free[:len(ready)]]] = True
            receiving[target[ready]] = True
            served[ready] = True
            left = queue[~served[queue]]
            if len(left):
                pending[e] = left
            else:
                del pending[e]
        for _, _, w in moves:
            senders[w.cell.elements].append(w.target)
            copies[w.cell.elements].append(w.cell)
            held[w.target] += 1
        rounds.append(moves)
    return rounds


def shift_colouring(edges: list[tuple[int, int]]) -> list[int] | None:
    """The edges coloured by their shift ``(receiver - sender) mod n``, or None where that takes
    more colours than the largest degree. A shift pairs each sender with one receiver and each
    receiver with one sender, so the ``k``-th edge of every pair of one shift can share a colour:
    a shift takes as many colours as its pairs' most edges. Where these sum to the largest degree
    (Koenig's bound: an exchange whose pairs are the same distance apart in every group, an
    all-gather of stripes, a transpose), the colouring is optimal, found in a few array passes
    instead of ``edge_colouring``'s alternating paths (quadratic in the devices: minutes on a
    thousand)."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if not len(e):
        return []
    n = int(e.max()) + 1
    shift, pair = (e[:, 1] - e[:, 0]) % n, e[:, 0] * n + e[:, 1]
    order = np.argsort(pair, kind="stable")
    starts = np.r_[True, pair[order][1:] != pair[order][:-1]]
    nth = np.empty(len(e), dtype=np.int64)  # each edge's rank among its pair's
    nth[order] = np.arange(len(e)) - np.maximum.accumulate(np.where(starts, np.arange(len(e)), 0))
    width = np.zeros(n, dtype=np.int64)  # colours each shift takes
    np.maximum.at(width, shift, nth + 1)
    if width.sum() != max(np.bincount(e[:, 0]).max(), np.bincount(e[:, 1]).max()):
        return None
    return ((np.cumsum(width) - width)[shift] + nth).tolist()


def edge_colouring(edges: list[tuple[int, int]]) -> list[int]:
    """Colour the edges of a bipartite multigraph (senders x receivers) with as many colours as
    the largest degree (Koenig): by shifts where that reaches it (``shift_colouring``), else
    flipping alternating paths when both ends' free colours differ."""
    by_shift = shift_colouring(edges)
    return path_colouring(edges) if by_shift is None else by_shift


def path_colouring(edges: list[tuple[int, int]]) -> list[int]:
    """``edge_colouring`` by alternating paths: each edge takes a colour free at both ends, after
    swapping the two ends' free colours along the path that blocks it."""
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


def least_loaded(wants: list, holders: dict, devices) -> list[int]:
    """A source per wanted cell, sent directly: the least-loaded holder (by elements sent so far),
    the first after the target (cyclically) among equals."""
    load = dict.fromkeys(devices, 0)
    n = len(devices)
    sources = []
    for t, cell in wants:
        cands = holders[cell.holders].devices
        if len(cands) == 1:
            src = int(cands[0])
        else:
            loads = np.fromiter((load[int(c)] for c in cands), np.int64, len(cands))
            least = cands[loads == loads.min()]
            src = int(least[np.argmin((least - t) % n)])
        load[src] += cell.size
        sources.append(src)
    return sources


def relays(wants: list, sources: list[int]) -> bool:
    """Whether the wants are sent by relays (``relayed_rounds``): a few devices hold what many lack
    (a broadcast), so the busiest sender has more transfers than the busiest receiver."""
    busiest_sender = max(Counter(sources).values(), default=0)
    return busiest_sender > max(Counter(w.target for w in wants).values(), default=0)


def transfers(wants: list, holders: dict, sources: list[int]) -> list[list[Transfer]]:
    """The wants, each from its source (``least_loaded``), as rounds of transfers ``(source, the
    source's own copy or None, want)``: relayed where ``relays``, else edge-coloured into as many
    rounds as the busiest device has transfers."""
    if relays(wants, sources):
        return relayed_rounds(wants, holders)
    colours = edge_colouring(list(zip(sources, (w.target for w in wants))))
    out: list[list[Transfer]] = [[] for _ in range(max(colours, default=-1) + 1)]
    for s, w, c in zip(sources, wants, colours):
        out[c].append(Transfer(s, None, w))
    return out
