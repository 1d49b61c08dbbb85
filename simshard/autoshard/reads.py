"""A value's reads priced as the partitioner runs them: each layout a value is resharded to is
made once and kept (``partition/copies.py``: ``get`` returns a copy already in the layout asked
for), so its reshard is paid once however many readers want the value laid out so.

Every read of a value (an op's operand, a loop's carry or stacked output, a program output, a
stacked input gathered before its loop) moves it from its layout ``s`` to the reader's ``t``
when a term of the model is one: a transport cell ``e[s, t]`` (``model.Search.edge``), or where
one end has a single layout the other end's binaries. ``Reads`` collects those terms per value,
scope weight and pair ``(s, t)``: a pair one read alone can move is priced on its terms; a pair
several reads can move is priced once, on a continuous ``u[s, t]`` bounded below by each read's
terms (``LinearModel.add_maxima``), which the minimisation holds at their maximum: one if any read
moves the value so. The linear relaxation stays that of the transports (``u`` is their maximum,
not a product). The copy is kept from one reader to the next (``held``), which the memory rows
count.

A transport block's cells are added as arrays (``add_block``: a read of the 7B step on 8 x 32 x 32
has up to 109 x 109 of them, two million in all) and grouped by pair with numpy (``table``): the
program is the one a pair at a time would make, variable for variable and row for row.

``moves`` lists the distinct reshards of a solution, each once: what ``report.breakdown`` and
``exhaustive`` price.
"""

from __future__ import annotations

from typing import Hashable, Iterable, NamedTuple

import numpy as np

from ..ir.program import Aval
from ..sharding.dims import Sharding
from .milp import LinearModel

Terms = tuple[tuple[int, float], ...]  # (variable, coefficient): one when the read moves the value


class Move(NamedTuple):
    """A reshard of a solution: a value of ``aval`` from ``src`` to ``dst``, ``weight`` times a step."""

    aval: Aval
    weight: int
    src: Sharding
    dst: Sharding


class Read(NamedTuple):
    """One read's terms for one pair, where it reads (its op, None for a loop's or an output's
    read) and the bytes of the copy it makes."""

    terms: Terms
    site: int | None
    nbytes: int


class Block(NamedTuple):
    """One read's transport block: cell ``cells[i, j]`` (a variable) moves the value of ``key``
    from ``src[i]`` to ``need[j]`` at ``price[i, j]`` (the model's unit, its weight included), a
    copy of ``size[j]`` bytes."""

    key: Hashable
    weight: int
    src: tuple[Sharding, ...]
    need: tuple[Sharding, ...]
    price: np.ndarray
    cells: np.ndarray
    site: int | None
    size: np.ndarray


class Table(NamedTuple):
    """Every read of a pair, a row each in the order added: its pair (numbered in the order pairs
    first appear), its term set (a variable where the terms are that variable once, else
    ``-1 - k`` for ``multi[k]``), its site (-1: none), its copy's bytes and its pair's price."""

    pair: np.ndarray
    term: np.ndarray
    site: np.ndarray
    nbytes: np.ndarray
    price: np.ndarray
    multi: list[Terms]

    def terms(self, term: int) -> Terms:
        return ((int(term), 1),) if term >= 0 else self.multi[-1 - int(term)]


class Reads:
    """The reshard terms of every read, per (value, weight, source layout, target layout)."""

    def __init__(self):
        self.parts: list = []  # ``Block``s and single reads ``(key, weight, s, t, price, Read)``, in order
        self.flat: Table | None = None  # the parts as arrays (``table``), once all are added

    def add(self, key, weight: int, s: Sharding, t: Sharding, price: float, terms: Iterable[tuple[int, float]],
            site: int | None = None, nbytes: int = 0) -> None:
        """One read of ``key`` at ``site`` moves it from ``s`` to ``t`` (``price`` in the model's
        unit, its weight included; a copy of ``nbytes``) when ``terms`` sum to one."""
        if s is t or price <= 0:
            return
        self.parts.append((key, weight, s, t, float(price), Read(tuple(terms), site, nbytes)))
        self.flat = None

    def add_block(self, block: Block) -> None:
        """A read's transport block: each cell read as ``add`` reads one pair (the diagonal, where
        a layout meets itself, and free moves left out)."""
        self.parts.append(block)
        self.flat = None

    def table(self) -> Table:
        """The reads as arrays, each pair numbered in the order it first appears (made once)."""
        if self.flat is None:
            self.flat = self._flatten()
        return self.flat

    def _flatten(self) -> Table:
        """``table``'s arrays: each part's reads in the order added (a block's row by row, its
        diagonal and free moves left out), layouts and (value, weight) groups numbered as met."""
        codes: dict[int, int] = {}  # id of a layout -> its number
        groups: dict[tuple, int] = {}  # (value, weight) -> its number
        multi: dict[Terms, int] = {}
        chunks: list[tuple] = []  # (group, source, target, price, term, site, bytes) arrays, in order
        singles: list[tuple] = []  # single reads not yet in a chunk
        code = lambda layouts: np.array([codes.setdefault(id(x), len(codes)) for x in layouts], dtype=np.int64)
        for part in self.parts + [None]:
            if (part is None or isinstance(part, Block)) and singles:  # a block (or the end) follows single reads
                chunks.append(tuple(np.array(col) for col in zip(*singles)))
                singles = []
            if isinstance(part, Block):
                g, (k, n) = groups.setdefault((part.key, part.weight), len(groups)), part.price.shape
                s, t, price = np.repeat(code(part.src), n), np.tile(code(part.need), k), part.price.ravel()
                keep = (s != t) & (price > 0)
                site = -1 if part.site is None else part.site
                chunks.append((np.full(keep.sum(), g), s[keep], t[keep], price[keep], part.cells.ravel()[keep],
                               np.full(keep.sum(), site), np.tile(part.size, k)[keep]))
            elif part is not None:
                key, weight, s, t, price, read = part
                term = (read.terms[0][0] if len(read.terms) == 1 and read.terms[0][1] == 1
                        else -1 - multi.setdefault(read.terms, len(multi)))
                singles.append((groups.setdefault((key, weight), len(groups)), codes.setdefault(id(s), len(codes)),
                                codes.setdefault(id(t), len(codes)), price, term,
                                -1 if read.site is None else read.site, read.nbytes))
        if not chunks:
            empty = np.zeros(0, dtype=np.int64)
            return Table(empty, empty, empty, np.zeros(0), np.zeros(0), [])
        g, s, t, price, term, site, nbytes = (np.concatenate([c[k] for c in chunks]) for k in range(7))
        layouts = len(codes)
        _, first, inverse = np.unique((g.astype(np.int64) * layouts + s) * layouts + t, return_index=True,
                                      return_inverse=True)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        return Table(rank[inverse.ravel()], term.astype(np.int64), site.astype(np.int64),
                     nbytes.astype(np.float64), price.astype(np.float64), list(multi))

    def price(self, model: LinearModel) -> None:
        """Each pair's price on the model, once per pair (module docstring): a pair whose reads
        share one term set costs its terms; one read by several, a maximum of them."""
        table = self.table()
        if not len(table.pair):
            return
        # each pair's distinct term sets, in the order they first appear
        span = int(max(table.term.max(), 0)) + len(table.multi) + 1
        _, first = np.unique(table.pair * span + (table.term + len(table.multi)), return_index=True)
        first = first[np.lexsort((first, table.pair[first]))]
        pair, term, price = table.pair[first], table.term[first], table.price[first]
        count = np.bincount(pair)
        alone = count[pair] == 1
        which, cols, coeffs = self._entries(table, term[alone])
        model.add_costs(cols, price[alone][which] * coeffs)  # (a pair one term set moves costs its terms)
        shared = ~alone
        if not shared.any():
            return
        pair, term, price = pair[shared], term[shared], price[shared]
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        model.add_maxima(price[starts], np.diff(np.r_[starts, len(pair)]), *self._entries(table, term))

    @staticmethod
    def _entries(table: Table, term: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The term sets ``term`` as entries, in order: (which of them, variable, coefficient)."""
        single = term >= 0
        counts = np.ones(len(term), dtype=np.int64)
        many = np.flatnonzero(~single)
        for i in many.tolist():
            counts[i] = len(table.terms(term[i]))
        at = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
        cols, coeffs = np.empty(int(counts.sum()), dtype=np.int64), np.ones(int(counts.sum()))
        cols[at[single]] = term[single]
        for i in many.tolist():
            terms = table.terms(term[i])
            cols[at[i]:at[i] + len(terms)] = [v for v, _ in terms]
            coeffs[at[i]:at[i] + len(terms)] = [c for _, c in terms]
        return np.repeat(np.arange(len(term)), counts), cols, coeffs

    def held(self, model: LinearModel, order: list[int]) -> dict[int, list[tuple[int, float]]]:
        """Site -> (variable, bytes) of the copies kept there for a later reader: a copy two
        consecutive readers (in program order, ``order``: the sites so ordered) both read lives at
        every op between them, where a continuous ``w >= e_first + e_next - 1`` counts it (each
        reader's own op counts it already, as its operand's buffer). Adds those variables and rows."""
        at = {site: i for i, site in enumerate(order)}
        out: dict[int, list[tuple[int, float]]] = {}
        for reads in self.pairs_read_twice():
            placed = sorted((at[r.site], r) for r in reads)
            for (i, a), (j, b) in zip(placed, placed[1:]):
                if j - i < 2 or a.terms == b.terms:
                    continue
                w = model.var(0.0, binary=False)
                model.row([(w, 1)] + [(v, -c) for v, c in a.terms + b.terms], -1, float("inf"))
                for site in order[i + 1:j]:
                    out.setdefault(site, []).append((w, a.nbytes))
        return out

    def pairs_read_twice(self) -> list[list[Read]]:
        """Per pair that two reads at sites can move, those reads (in the order added)."""
        table = self.table()
        sited = table.site >= 0
        twice = np.bincount(table.pair[sited], minlength=int(table.pair.max(initial=-1)) + 1) >= 2
        rows = np.flatnonzero(sited & twice[table.pair]) if len(twice) else np.zeros(0, int)
        out: dict[int, list[Read]] = {}
        for r in rows[np.argsort(table.pair[rows], kind="stable")].tolist():
            out.setdefault(int(table.pair[r]), []).append(
                Read(table.terms(table.term[r]), int(table.site[r]), table.nbytes[r].item()))
        return list(out.values())


def moves(edges, values, chosen) -> list[Move]:
    """The distinct reshards of a solution: per read ``edges`` (``model.Edge``) the layouts
    ``chosen`` picks at both ends, each (value, weight, pair) once."""
    seen: dict[tuple, Move] = {}
    for e in edges:
        s, t = chosen(e.src, values), chosen(e.dst, values)
        if s != t:
            seen.setdefault((e.source, e.weight, s, t), Move(e.aval, e.weight, s, t))
    return list(seen.values())


__all__ = ["Block", "Move", "Read", "Reads", "Table", "moves"]
