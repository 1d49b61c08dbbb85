"""A value's reads priced as the partitioner runs them: each layout a value is resharded to is
made once and kept (``partition/copies.py``: ``get`` returns a copy already in the layout asked
for), so its reshard is paid once however many readers want the value laid out so.

Every read of a value (an op's operand, a loop's carry or stacked output, a program output, a
stacked input gathered before its loop) moves it from its layout ``s`` to the reader's ``t``
when a term of the model is one: a transport cell ``e[s, t]`` (``model.Search.edge``), or where
one end has a single layout the other end's binaries. ``Reads`` collects those terms per value,
scope weight and pair ``(s, t)``: a pair one read alone can move is priced on its terms; a pair
several reads can move is priced once, on a continuous ``u[s, t]`` bounded below by each read's
terms, which the minimisation holds at their maximum: one if any read moves the value so. The
linear relaxation stays that of the transports (``u`` is their maximum, not a product). The copy
is kept from one reader to the next (``held``), which the memory rows count.

``moves`` lists the distinct reshards of a solution, each once: what ``report.breakdown`` and
``exhaustive`` price.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

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


class Reads:
    """The reshard terms of every read, per (value, weight, source layout, target layout)."""

    def __init__(self):
        self.pairs: dict[tuple, tuple[float, list[Read]]] = {}

    def add(self, key, weight: int, s: Sharding, t: Sharding, price: float, terms: Iterable[tuple[int, float]],
            site: int | None = None, nbytes: int = 0) -> None:
        """One read of ``key`` at ``site`` moves it from ``s`` to ``t`` (``price`` in the model's
        unit, its weight included; a copy of ``nbytes``) when ``terms`` sum to one."""
        if s is t or price <= 0:
            return
        got = self.pairs.setdefault((key, weight, id(s), id(t)), (price, []))
        got[1].append(Read(tuple(terms), site, nbytes))

    def price(self, model: LinearModel) -> None:
        """Each pair's price on the model, once per pair (module docstring)."""
        for price, reads in self.pairs.values():
            distinct = list(dict.fromkeys(r.terms for r in reads))
            if len(distinct) == 1:
                for v, c in distinct[0]:
                    model.add_cost(v, price * c)
                continue
            model.maximum(price, distinct)

    def held(self, model: LinearModel, order: list[int]) -> dict[int, list[tuple[int, float]]]:
        """Site -> (variable, bytes) of the copies kept there for a later reader: a copy two
        consecutive readers (in program order, ``order``: the sites so ordered) both read lives at
        every op between them, where a continuous ``w >= e_first + e_next - 1`` counts it (each
        reader's own op counts it already, as its operand's buffer). Adds those variables and rows."""
        at = {site: i for i, site in enumerate(order)}
        out: dict[int, list[tuple[int, float]]] = {}
        for _, reads in self.pairs.values():
            placed = sorted((at[r.site], r) for r in reads if r.site is not None)
            for (i, a), (j, b) in zip(placed, placed[1:]):
                if j - i < 2 or a.terms == b.terms:
                    continue
                w = model.var(0.0, binary=False)
                model.row([(w, 1)] + [(v, -c) for v, c in a.terms + b.terms], -1, float("inf"))
                for site in order[i + 1:j]:
                    out.setdefault(site, []).append((w, a.nbytes))
        return out


def moves(edges, values, chosen) -> list[Move]:
    """The distinct reshards of a solution: per read ``edges`` (``model.Edge``) the layouts
    ``chosen`` picks at both ends, each (value, weight, pair) once."""
    seen: dict[tuple, Move] = {}
    for e in edges:
        s, t = chosen(e.src, values), chosen(e.dst, values)
        if s != t:
            seen.setdefault((e.source, e.weight, s, t), Move(e.aval, e.weight, s, t))
    return list(seen.values())


__all__ = ["Move", "Read", "Reads", "moves"]
