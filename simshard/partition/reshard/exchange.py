"""The exchange: any layout to any layout, each device receiving exactly what it lacks.

Every device's target block is cut into *cells*: along each dim, maximal runs of consecutive
local positions whose global indices are held by the same set of source blocks; a cell is a
product of runs, so some single device holds all of it. A device keeps the cells it holds itself
and receives every other cell from one holder (the least loaded one, among devices holding the
same contribution when a pending reduction is carried along). The received bytes are therefore
exactly the elements of the new block the device did not have: the lower bound for any plan.

Transfers are point-to-point, grouped into rounds in which every device sends at most one cell
and receives at most one (a bipartite edge colouring with as many rounds as the busiest device
has transfers); each round is one ``CollectivePermute``. Where a few devices hold what many
lack (a broadcast: the busiest sender has more transfers than the busiest receiver), a device
that has received a cell passes it on in later rounds, so copies double each round. The block is
assembled with ``dynamic_update_slice`` into a zero block of the target's local shape. Every
device emits the same instructions (devices with fewer cells slice empty pieces), so schedules
stay SPMD.

Devices holding one target block want the same cells, so blocks are cut once, not per device;
dims neither sharding splits are left out of the plan (which is cached) and put back after; a
round is held as columns (``Round``) and emitted with numpy (``exchange_emit``; the rounds
themselves: ``rounds``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from ...errors import ShardingError
from ...sharding.dims import Sharding
from .plan import Step, block_size, common_count, layout_of
from .layout_checks import as_positions, positions
from .reductions import contribution_class
from .deferred import Counted, Deferred, DeferredSent
from .rounds import CellHolders, Transfer, least_loaded, relays, transfers
from .exchange_view import View, in_view


@dataclass(frozen=True, eq=False)
class ExchangeData:
    """An exchange step's data for emission: per device its block's shape and the cells it
    holds itself, and the rounds of transfers."""

    rank: int
    shapes: dict  # device -> its target block's local shape (in the view, where there is one)
    local: dict  # device -> [(source positions per dim, starts per dim)]
    rounds: tuple[Round, ...]
    view: View | None = None  # the blocks reshaped into it first, and out of it after (``exchange_view``)

    @property
    def round_count(self) -> int:
        return len(self.rounds)

    @property
    def pair_devices(self) -> tuple[int, ...]:
        """The devices named in a round's pairs, sorted."""
        return tuple(sorted({d for r in self.rounds for pair in r.pairs for d in pair}))


class Round(NamedTuple):
    """One round of transfers, a row per transfer: who sends to whom, what the sender slices
    (``piece``: an index into ``pieces``, each ``(relayed, positions per dim)``; a relayed cell
    is one the sender received in an earlier round, read from the block it is assembling rather
    than from its source block), where the cell lands in the receiver's block, and its elements."""

    sources: np.ndarray
    targets: np.ndarray
    piece: np.ndarray
    pieces: tuple
    starts: np.ndarray  # [transfers, rank]
    sizes: np.ndarray
    pairs: tuple[tuple[int, int], ...]  # (source, target) per transfer, by target

    @property
    def relayed(self) -> np.ndarray:
        return np.array([relayed for relayed, _ in self.pieces], dtype=bool)[self.piece]


class _Cell(NamedTuple):
    """A cell of a target block: which sources hold it (key of ``holders``), the global elements
    it covers (which other devices' cells equal it), its size, and per dim its run of local
    positions (``span``, end exclusive) and where that run starts."""

    holders: tuple
    elements: tuple
    size: int
    span: tuple
    starts: tuple


class _Want(NamedTuple):
    """A cell a device must receive."""

    target: int
    cell: _Cell


def plan_exchange(before, after, shape, itemsize: int) -> Step | None:
    """The exchange step from ``before`` to ``after`` (None if some element has no holder).
    Between shardings with the same pending axes (every element has a holder in each
    contribution class) the rounds are planned on first use (``deferred``): each device receives
    exactly the elements it lacks, known without them; what each sends and how many rounds there
    are, once the transfers' sources are chosen (``_counted``), before they are coloured."""
    shape = tuple(shape)
    if isinstance(before, Sharding) and isinstance(after, Sharding) and before.unreduced == after.unreduced:
        L, L2 = layout_of(before, shape), layout_of(after, shape)
        if set(L.devices) == set(L2.devices):
            lacking = {d: n * itemsize for d, n in _minimum(L, L2, L2.devices).items()}
            later = Deferred(lambda: _counted(before, after, shape, itemsize), lambda: _planned(before, after, shape, itemsize))
            return Step("exchange", before, after, shape, itemsize, (), (), sent=DeferredSent(later), received=lacking,
                        minimum=lacking, data=later)
    return _eager(before, after, shape, itemsize)


def _planned(before, after, shape, itemsize: int) -> tuple:
    """A deferred exchange's data and sent bytes per device."""
    step = _eager(before, after, shape, itemsize)
    return step.data, step.sent


def _counted(before, after, shape, itemsize: int) -> Counted:
    """A deferred exchange's sent bytes, round count and devices named, from its transfers'
    sources (``rounds.least_loaded``): a device sends the cells it is the source of, and the
    colouring makes as many rounds as the busiest device has transfers. Where cells are relayed
    (``rounds.relays``), read off the planned rounds. Whole dims are left out, as ``_eager`` does."""
    whole, times = _whole_dims(before, after, shape), 1
    if whole:
        keep = [k for k in range(len(shape)) if k not in whole]
        times = math.prod(shape[k] for k in whole)
        before, after, shape = _without(before, keep), _without(after, keep), tuple(shape[k] for k in keep)
    L, L2, shape, _ = in_view(layout_of(before, shape), layout_of(after, shape), shape)
    cut = _cells(L, L2, shape)
    if cut is None:  # pragma: no cover - equal pending axes give every element a holder
        raise ShardingError("no-plan", f"no exchange from {before} to {after}: some element has no holder")
    sources = least_loaded(cut.wants, cut.holders, L2.devices)
    if relays(cut.wants, sources):
        data, sent = _planned(before, after, shape, itemsize)
        return Counted({d: n * times for d, n in sent.items()}, data.round_count, data.pair_devices)
    sent = dict.fromkeys(L2.devices, 0)
    for s, w in zip(sources, cut.wants):
        sent[s] += w.cell.size * times * itemsize
    targets = [w.target for w in cut.wants]
    busiest = max(max(Counter(sources).values(), default=0), max(Counter(targets).values(), default=0))
    return Counted(sent, busiest, tuple(sorted(set(sources) | set(targets))))


def _eager(before, after, shape, itemsize: int) -> Step | None:
    """The exchange step with its rounds planned now."""
    whole = _whole_dims(before, after, shape)
    if whole:  # planned without them (every device holds them whole, before and after), then put back
        keep = [k for k in range(len(shape)) if k not in whole]
        core = _cached_plan(_without(before, keep), _without(after, keep), tuple(shape[k] for k in keep))
        if core is not None:  # (planned in a view, it is planned whole: the view keeps whole dims whole)
            core = _with_whole_dims(core, shape, keep) if core.data.view is None else _plan(before, after, shape)
    else:
        core = _plan(before, after, shape)
    if core is None:
        return None
    bytes_of = lambda elements: {d: n * itemsize for d, n in elements.items()}
    return Step("exchange", before, after, shape, itemsize, (), (), sent=bytes_of(core.sent), received=bytes_of(core.received),
                minimum=bytes_of(core.minimum), data=core.data)


class _Plan(NamedTuple):
    """An exchange planned in elements: the step's data, and per device the elements it sends,
    receives and lacks."""

    data: ExchangeData
    sent: dict
    received: dict
    minimum: dict


def _whole_dims(before, after, shape) -> set[int]:
    """Dims of two shardings that neither splits (each device holds them whole, before and
    after): an exchange moves nothing along them."""
    if not (isinstance(before, Sharding) and isinstance(after, Sharding)):
        return set()
    whole = {k for k, (a, b) in enumerate(zip(before.dims, after.dims)) if not a.axes and not b.axes}
    return whole if len(whole) < len(shape) else set()  # (a scalar plan would gain nothing)


def _without(s: Sharding, keep: list[int]) -> Sharding:
    return dataclasses.replace(s, dims=tuple(s.dims[k] for k in keep))


@lru_cache(maxsize=64)
def _cached_plan(before: Sharding, after: Sharding, shape: tuple[int, ...]) -> _Plan | None:
    return _plan(before, after, shape)


def _with_whole_dims(core: _Plan, shape: tuple[int, ...], keep: list[int]) -> _Plan:
    """``core`` (planned over the dims in ``keep``) with the whole dims put back: whole runs of
    local positions starting at 0, and every cell that many times larger."""
    rank = len(shape)
    whole = [k for k in range(rank) if k not in keep]
    times = math.prod(shape[k] for k in whole)
    # a tuple over the kept dims, followed by the whole dims' values, put in dim order (in C)
    order = itemgetter(*((keep + whole).index(k) for k in range(rank)))
    full = lambda kept, fill: order(kept + fill)
    whole_run = tuple(range(shape[k]) for k in whole)
    zero = (0,) * len(whole)
    size = tuple(shape[k] for k in whole)
    scaled = lambda elements: {d: n * times for d, n in elements.items()}
    data = core.data
    return _Plan(
        ExchangeData(
            rank, {d: full(s, size) for d, s in data.shapes.items()},
            {d: [(full(pos, whole_run), full(starts, zero)) for pos, starts in cells] for d, cells in data.local.items()},
            tuple(_widened(r, keep, shape, lambda pos: full(pos, whole_run), times) for r in data.rounds)),
        scaled(core.sent), scaled(core.received), scaled(core.minimum))


def _widened(r: Round, keep: list[int], shape: tuple[int, ...], full, times: int) -> Round:
    """A round planned over the dims in ``keep`` with the whole dims put back."""
    starts = np.zeros((len(r.starts), len(shape)), dtype=np.int64)
    starts[:, keep] = r.starts
    return r._replace(pieces=tuple((relayed, full(pos)) for relayed, pos in r.pieces), starts=starts, sizes=r.sizes * times)


def _plan(before, after, shape: tuple[int, ...]) -> _Plan | None:
    """The exchange's cells, holders and rounds (None if some element has no holder)."""
    L, L2 = layout_of(before, shape), layout_of(after, shape)
    devices = L2.devices
    if set(devices) != set(L.devices):
        return None
    L, L2, shape, view = in_view(L, L2, shape)
    cut = _cells(L, L2, shape)
    if cut is None:
        return None
    rounds = tuple(_round(moves, cut.place, len(shape)) for moves in transfers(cut.wants, cut.holders, least_loaded(cut.wants, cut.holders, devices)))
    sent = dict.fromkeys(devices, 0)
    rec = dict.fromkeys(devices, 0)
    for r in rounds:
        for s, t, n in zip(r.sources.tolist(), r.targets.tolist(), r.sizes.tolist()):
            sent[s] += n
            rec[t] += n
    data = ExchangeData(len(shape), {d: L2.local_shape(d) for d in devices}, cut.local, rounds, view)
    return _Plan(data, sent, rec, _minimum(L, L2, devices))


class _Placer:
    """Positions of a device's target cell in a source block, per dim (cached by the identity of
    index arrays, which layouts share between devices; the placer holds both layouts, so the
    ids stay theirs)."""

    def __init__(self, L, L2):
        self.L, self.L2 = L, L2
        self.placed: dict[tuple, range | tuple] = {}

    def __call__(self, src: int, d: int, span) -> tuple:
        """Positions of ``d``'s cell (its runs ``span``) in ``src``'s source block, per dim."""
        pos = []
        for k, (a, b) in enumerate(span):
            outer, inner = self.L.index_map[src][k], self.L2.index_map[d][k]
            at = (id(outer), id(inner), a, b)
            if at not in self.placed:
                self.placed[at] = as_positions(positions(outer, inner[a:b]))
            pos.append(self.placed[at])
        return tuple(pos)


class _Cut(NamedTuple):
    """Target blocks cut into cells: per device the cells it holds itself (``local``: positions
    in its source block, starts in its target block), the cells devices must receive
    (``wants``), the holders of each cell (key -> (mask over sources, devices)) and the placer."""

    local: dict
    wants: list
    holders: dict
    place: _Placer


def _cells(L, L2, shape) -> _Cut | None:
    """Every target block cut into cells, each held locally or wanted (None if some cell has no
    holder). Devices holding one target block (their layouts share its tuple of index arrays)
    in one contribution class want the same cells: the block is cut once for all of them."""
    src_devs = np.array(L.devices)
    arrid, sid, member = _signatures(L, shape)
    cls_src = [contribution_class(L, s) for s in L.devices]
    bases: dict[tuple, np.ndarray] = {}  # per contribution class: the sources of that class
    holders: dict[tuple, CellHolders] = {}  # per (class, cell): which sources hold the cell
    row = {int(s): k for k, s in enumerate(src_devs)}  # device -> its position in src_devs
    place = _Placer(L, L2)
    groups: dict[tuple, list[int]] = {}
    for d in L2.devices:
        # by the identity of the block's tuple (L2 holds it): devices holding one block share it
        groups.setdefault((id(L2.index_map[d]), contribution_class(L2, d)), []).append(d)
    local: dict[int, list] = {d: [] for d in L2.devices}
    wants: list[_Want] = []
    for (_, cls), members in groups.items():
        block = L2.index_map[members[0]]
        runs = _runs(block, sid)
        if runs is None:
            continue
        if cls not in bases:
            bases[cls] = np.array([c == cls for c in cls_src])
        rows = [row[d] for d in members]
        for cut in itertools.product(*runs):
            key = (cls, tuple(s for _, _, s in cut))
            if key not in holders:
                ok = bases[cls].copy()
                for k, (a, b, s) in enumerate(cut):
                    ok &= member[k][s][arrid[k]]
                holders[key] = CellHolders(ok, src_devs[ok])
            ok, cands = holders[key]
            if len(cands) == 0:
                return None
            span = tuple((a, b) for a, b, _ in cut)
            cell = _Cell(key, (cls,) + tuple(ix[a:b].tobytes() for ix, (a, b) in zip(block, span)),
                         math.prod(b - a for a, b in span), span, tuple(a for a, _ in span))
            for d, held in zip(members, ok[rows].tolist()):
                if held:
                    local[d].append((place(d, d, span), cell.starts))
                else:
                    wants.append(_Want(d, cell))
    return _Cut(local, wants, holders, place)


def _minimum(L, L2, devices) -> dict[int, int]:
    """Per device, the elements of its target block it does not hold (the least it must receive)."""
    common: dict[tuple, int] = {}  # elements two blocks share, by their index arrays' ids (L, L2 hold them)
    minimum = {}
    for d in devices:
        have = 0
        if contribution_class(L2, d) == contribution_class(L, d):
            have = 1
            for a, b in zip(L2.index_map[d], L.index_map[d]):
                if (id(a), id(b)) not in common:
                    common[(id(a), id(b))] = common_count(a, b)
                have *= common[(id(a), id(b))]
        minimum[d] = block_size(L2, d) - have
    return minimum

def _round(moves: list[Transfer], place, rank: int) -> Round:
    """The columns of one round's transfers ``(source, the source's own copy or None, want)``."""
    pieces: dict[tuple, int] = {}
    piece = []
    for s, own, (t, cell) in moves:
        key = (False, place(s, t, cell.span)) if own is None else (True, tuple(range(a, b) for a, b in own.span))
        piece.append(pieces.setdefault(key, len(pieces)))
    column = lambda values: np.array(values, dtype=np.int64)
    sources, targets = column([s for s, _, _ in moves]), column([w.target for _, _, w in moves])
    order = np.argsort(targets, kind="stable")
    return Round(sources, targets, column(piece), tuple(pieces), column([w.cell.starts for _, _, w in moves]).reshape(len(moves), rank),
                 column([w.cell.size for _, _, w in moves]), tuple(zip(sources[order].tolist(), targets[order].tolist())))


def _signatures(L, shape) -> tuple[list, list, list]:
    """Per dim: each source's distinct index array (an id per source), each global index's
    signature (which of those arrays hold it, as an id) and the signatures as masks."""
    arrid, sid, member = [], [], []
    for k in range(len(shape)):
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
    return arrid, sid, member


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
