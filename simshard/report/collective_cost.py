"""What the direct collective algorithms send, written once for the runtime and the estimate.

``runtime/collectives.py`` runs the direct algorithms over a transport; the estimate
(``report/estimate``) costs them without data. Both read their messages from here:

* the chunks: an all-reduce cuts its flattened buffer in ``g`` balanced chunks
  (``balanced_chunks``), a reduce-scatter and an all-to-all cut along an axis by ``splits``;
* which chunks travel (``sends``): an empty reduce-scatter or all-reduce chunk is not sent (both
  sides know its size is zero); all-gather and all-to-all blocks always are (their receivers
  learn the sizes from them);
* ``analytic_min_bytes``: what a member must receive whatever the algorithm (``report/comm.py``
  describes it per kind), beside which a report shows what it did receive;
* each member's ``Cost`` in closed form (bytes and messages sent and received, and its per-peer
  rows for groups of up to ``PEER_ROWS`` members): O(1) per member once a group's sums are known,
  since a direct collective over ``g`` devices sends ``g(g-1)`` messages, which an 8,192-device
  all-reduce could not enumerate.

The runtime's records are the transport's own counts; the estimate's are these costs, and
``tests/report/test_estimate.py`` holds the two equal.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Mapping, NamedTuple, Sequence

PEER_ROWS = 64  # groups larger than this get no per-peer rows (the totals stay exact)

DROPS_EMPTY_CHUNKS = frozenset({"reduce_scatter", "all_reduce"})  # kinds whose empty chunks are not sent


class Cost(NamedTuple):
    """One member's side of a collective: its totals and its per-peer rows, ``CommRecord.peers``
    as they are (peer, bytes sent to it, bytes received from it), sorted by peer; none for a
    group over ``PEER_ROWS``. (Plain rows: a large mesh makes millions of them.)"""

    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    peers: tuple[tuple[int, int, int], ...] = ()


class AllToAllGroup(NamedTuple):
    """An all-to-all's group as its members' costs read it, summed once per group: each member's
    splits, their totals and its bytes per index along its split axis, in group order."""

    splits: tuple[tuple[int, ...], ...]
    totals: tuple[int, ...]  # each member's sum of splits (its split axis's length)
    rows: tuple[int, ...]
    row_total: int
    uniform: bool  # every member cuts by the same splits (the usual case: sums instead of loops)

    @staticmethod
    def of(splits: Sequence[Sequence[int]], rows: Sequence[int]) -> "AllToAllGroup":
        splits = tuple(tuple(s) for s in splits)
        first = splits[0]
        # members usually share one splits tuple: an identity test before the O(g) comparison
        uniform = all(s is first or s == first for s in splits)
        totals = (sum(first),) * len(splits) if uniform else tuple(sum(s) for s in splits)
        return AllToAllGroup(splits, totals, tuple(rows), sum(rows), uniform)


def balanced_chunks(n: int, g: int) -> list[int]:
    """``n`` elements in ``g`` chunks whose lengths differ by at most one, longer ones first
    (how an all-reduce cuts its flattened buffer)."""
    q, r = divmod(int(n), int(g))
    return [q + (1 if i < r else 0) for i in range(g)]


def balanced_chunk(n: int, g: int, i: int) -> int:
    """``balanced_chunks(n, g)[i]`` without the list (an 8,192-device group asks per device)."""
    q, r = divmod(int(n), int(g))
    return q + (1 if i < r else 0)


def sends(kind: str, length: int) -> bool:
    """Whether a direct ``kind`` collective sends a chunk ``length`` long (see the docstring)."""
    return bool(length) or kind not in DROPS_EMPTY_CHUNKS


@functools.lru_cache(maxsize=4096)
def split_sums(splits: tuple) -> tuple[int, int]:
    """(total length, how many chunks are not empty) of a collective's ``splits``."""
    return sum(splits), sum(1 for c in splits if c)


def peer_rows(group: Sequence[int], me: int, sent: Callable[[int], int | None],
              received: Callable[[int], int | None]) -> tuple[tuple[int, int, int], ...]:
    """Per-peer rows for a small group: ``sent(j)`` / ``received(j)`` bytes to / from member j,
    None where no message goes; none for a group over ``PEER_ROWS``."""
    if len(group) > PEER_ROWS:
        return ()
    rows = []
    for j, p in enumerate(group):
        if p == me:
            continue
        s, r = sent(j), received(j)
        if s is not None or r is not None:
            rows.append((p, s or 0, r or 0))
    return tuple(sorted(rows))


def all_gather_cost(group: Sequence[int], i: int, sizes: Sequence[int], total: int, rows: bool = True) -> Cost:
    """Member ``i`` sends its block (``sizes[i]`` bytes) to every peer and gets each peer's (its
    per-peer rows only with ``rows``: the estimate makes them when a record is listed)."""
    g, mine = len(group), sizes[i]
    return Cost((g - 1) * mine, total - mine, g - 1, g - 1,
                peer_rows(group, group[i], lambda j: mine, lambda j: sizes[j]) if rows else ())


def reduce_scatter_cost(group: Sequence[int], i: int, splits: tuple, row: int, rows: bool = True) -> Cost:
    """Member ``i`` sends each peer's chunk (``splits[j]`` indices of ``row`` bytes) and gets its
    own from each peer; empty chunks are not sent."""
    g = len(group)
    total, nonempty = split_sums(splits)
    mine = splits[i] * row
    got = (g - 1) if sends("reduce_scatter", splits[i]) else 0  # each peer sends its part of my chunk
    live = nonempty - (1 if splits[i] else 0)  # the peers whose chunk is not empty
    return Cost((total - splits[i]) * row, got * mine, live, got,
                peer_rows(group, group[i], lambda j: splits[j] * row if sends("reduce_scatter", splits[j]) else None,
                          lambda j: mine if got else None) if rows else ())


def all_reduce_cost(group: Sequence[int], i: int, elements: int, itemsize: int, rows: bool = True) -> Cost:
    """A reduce-scatter of ``g`` balanced chunks of the flattened buffer (step 0: each peer's
    chunk out, my chunk in from each), then an all-gather of them (step 1: mine out to each, the
    others' back in); empty chunks are not sent."""
    g = len(group)
    mine = balanced_chunk(elements, g, i)
    own = (g - 1) if sends("all_reduce", mine) else 0
    n_others = min(elements, g) - (1 if mine else 0)  # balanced chunks: min(n, g) are not empty
    nbytes = (elements - mine + own * mine) * itemsize

    def both(j: int) -> int | None:
        c = balanced_chunk(elements, g, j)
        return (c + (mine if own else 0)) * itemsize if c or own else None

    messages = n_others + own
    return Cost(nbytes, nbytes, messages, messages, peer_rows(group, group[i], both, both) if rows else ())


def all_to_all_cost(group: Sequence[int], i: int, sums: AllToAllGroup, rows: bool = True) -> Cost:
    """Member ``i`` sends chunk ``j`` of its split axis to member ``j`` and gets chunk ``i`` of
    every peer's (every block is sent, even an empty one)."""
    g, mine, row = len(group), sums.splits[i], sums.rows[i]
    sent = (sums.totals[i] - mine[i]) * row
    if sums.uniform:
        received = mine[i] * (sums.row_total - row)
    else:
        received = sum(sums.splits[j][i] * sums.rows[j] for j in range(g) if j != i)
    return Cost(sent, received, g - 1, g - 1,
                peer_rows(group, group[i], lambda j: mine[j] * row, lambda j: sums.splits[j][i] * sums.rows[j])
                if rows else ())


def collective_permute_costs(targets: Mapping[int, Sequence[int]], nbytes: Mapping[int, int]) -> dict[int, Cost]:
    """Every device's cost in a permute: ``targets`` maps each source to the devices it sends its
    ``nbytes[source]`` bytes to (a device sending to itself copies, no message)."""
    traffic: dict[int, dict[int, list[int]]] = {}  # device -> peer -> [sent, received, messages out, messages in]
    for me, those in targets.items():
        for t in those:
            if t != me:
                out = traffic.setdefault(me, {}).setdefault(t, [0, 0, 0, 0])
                out[0] += nbytes[me]
                out[2] += 1
                back = traffic.setdefault(t, {}).setdefault(me, [0, 0, 0, 0])
                back[1] += nbytes[me]
                back[3] += 1
    return {me: summed(peers) for me, peers in traffic.items()}


def summed(peers: Mapping[int, Sequence[int]]) -> Cost:
    """One device's ``Cost`` from its traffic with each peer, peer -> (bytes sent, bytes received,
    messages sent, messages received): the sums and the rows. (The transfer log counts an
    executed run's messages the same way: ``TransferLog.counts``.)"""
    if len(peers) == 1:  # one peer (a permute, a two-device group): its figures are the sums
        for p, (s, r, ms, mr) in peers.items():
            return Cost(s, r, ms, mr, ((p, s, r),))
    sent = received = messages_sent = messages_received = 0
    for s, r, ms, mr in peers.values():
        sent += s
        received += r
        messages_sent += ms
        messages_received += mr
    return Cost(sent, received, messages_sent, messages_received,
                tuple((p, v[0], v[1]) for p, v in sorted(peers.items())))


NO_COST = Cost(0, 0, 0, 0, ())


def analytic_min_bytes(instr, device: int, in_shape: Sequence[int], out_shape: Sequence[int], itemsize: int,
                       index: int | None = None, receivers: frozenset | set | None = None) -> int:
    """Bytes ``device`` must receive to run the collective ``instr`` (a schedule instruction)
    whose local input / output shapes are ``in_shape`` / ``out_shape`` (``report/comm.py``'s
    module docstring gives it per kind).
    ``index``: the device's position in ``instr.group``, and for a permute ``receivers``: the
    devices another device sends to, when the caller knows them (else a search of the group or
    the pairs, thousands long on a large mesh)."""
    n_in, n_out = math.prod(in_shape), math.prod(out_shape)
    kind = instr.kind
    if kind == "all_gather":
        return (n_out - n_in) * itemsize
    if kind == "reduce_scatter":
        return (len(instr.group) - 1) * n_out * itemsize
    if kind == "all_reduce":
        g = len(instr.group)
        c = balanced_chunk(n_in, g, instr.group.index(device) if index is None else index)
        return ((g - 1) * c + (n_in - c)) * itemsize
    if kind == "all_to_all":
        i = instr.group.index(device) if index is None else index
        along = in_shape[instr.split_axis]
        own = (n_in // along) * instr.splits[i] if along else 0
        return (n_out - own) * itemsize
    if kind == "collective_permute":
        got = device in receivers if receivers is not None else any(t == device and s != device for s, t in instr.pairs)
        return n_out * itemsize if got else 0
    raise ValueError(f"no analytic minimum for instruction kind {kind!r}")


__all__ = ["AllToAllGroup", "Cost", "DROPS_EMPTY_CHUNKS", "NO_COST", "PEER_ROWS", "all_gather_cost",
           "all_reduce_cost", "all_to_all_cost", "analytic_min_bytes", "balanced_chunk", "balanced_chunks",
           "collective_permute_costs", "peer_rows", "sends", "split_sums"]
