"""Shared reads (``autoshard/reads.py``): a value resharded to a layout is paid once however many
readers want it there. The model's optimum, for every choice of the source's layout and of each
reader's, is the price of the distinct copies that choice makes: each target layout other than
the source's that some reader wants, once."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simshard.autoshard.milp import LinearModel
from simshard.autoshard.reads import Block, Reads

pytest.importorskip("scipy")

LAYOUTS = 3


def one_hot(model: LinearModel) -> list[int]:
    first = model.vars(np.zeros(LAYOUTS))
    vs = list(range(first, first + LAYOUTS))
    model.row([(v, 1) for v in vs], 1, 1)
    return vs


def transport(model: LinearModel, src: list[int], dst: list[int]) -> np.ndarray:
    """Cells ``e[s, t]``: row ``s`` sums to ``src[s]``, column ``t`` to ``dst[t]``."""
    first = model.vars(np.zeros(LAYOUTS * LAYOUTS), binary=False, unit=True)
    cells = np.arange(first, first + LAYOUTS * LAYOUTS).reshape(LAYOUTS, LAYOUTS)
    for i in range(LAYOUTS):
        model.row([(int(c), 1) for c in cells[i]] + [(src[i], -1)], 0, 0)
        model.row([(int(c), 1) for c in cells[:, i]] + [(dst[i], -1)], 0, 0)
    return cells


def shared_model(prices: np.ndarray, fixed: int):
    """A value of ``LAYOUTS`` layouts read by two readers of their own layouts (transport cells)
    and one that reads it in layout ``fixed`` (its terms: the source's binaries)."""
    layouts = [object() for _ in range(LAYOUTS)]
    model, reads = LinearModel(), Reads()
    src = one_hot(model)
    readers = [one_hot(model) for _ in range(2)]
    for r, dst in enumerate(readers):
        cells = transport(model, src, dst)
        for s, t in itertools.product(range(LAYOUTS), repeat=2):
            reads.add("v", 1, layouts[s], layouts[t], prices[s, t], [(int(cells[s, t]), 1)], site=r)
    for s in range(LAYOUTS):
        reads.add("v", 1, layouts[s], layouts[fixed], prices[s, fixed], [(src[s], 1)], site=2)
    reads.price(model)
    return model, src, readers


@pytest.mark.parametrize("seed", range(4))
def test_each_copy_paid_once_for_every_choice(seed):
    rng = np.random.default_rng(seed)
    prices = rng.integers(1, 50, (LAYOUTS, LAYOUTS)).astype(float)
    fixed = seed % LAYOUTS
    model, src, readers = shared_model(prices, fixed)
    binaries = model.integrality() == 1
    for s, a, b in itertools.product(range(LAYOUTS), repeat=3):
        allowed = np.zeros(model.size, dtype=bool)
        allowed[[src[s], readers[0][a], readers[1][b]]] = True
        got = model.solve(allowed=allowed | ~binaries)
        copies = {a, b, fixed} - {s}
        assert got.objective == pytest.approx(sum(prices[s, t] for t in copies), abs=1e-6), (s, a, b)


def test_the_optimum_shares_a_copy():
    """The source held in layout 0 and both readers kept out of it: all three readers read one
    copy in layout 1 (10; priced per read it would be 30), not two copies (20)."""
    prices = np.array([[0, 10, 10], [1, 0, 1], [1, 1, 0]], dtype=float)
    model, src, readers = shared_model(prices, fixed=1)
    for dst in readers:
        model.add_cost(dst[0], 100)
    allowed = model.integrality() != 1
    allowed[[src[0]] + readers[0] + readers[1]] = True
    got = model.solve(allowed=allowed)
    assert got.objective == pytest.approx(10)
    assert got.values[readers[0][1]] == got.values[readers[1][1]] == 1


def _as_arrays(model: LinearModel) -> dict:
    rows = model.constraints()[0]
    matrix = rows.A.tocsr()
    matrix.sort_indices()
    return {"cost": model.costs(), "integer": model.integrality(), "lb": np.asarray(rows.lb, float),
            "ub": np.asarray(rows.ub, float), "indptr": matrix.indptr, "indices": matrix.indices, "data": matrix.data,
            "maxima": np.array([tuple(m) for m in model.maxima], dtype=float)}


@pytest.mark.parametrize("seed", range(3))
def test_a_block_of_cells_makes_the_program_its_cells_make_one_pair_at_a_time(seed):
    """``add_block`` (a read's transport block as arrays, grouped by pair with numpy) and ``add``
    of each of its cells, between single reads of another value and of the same one, make the
    same program, variable for variable and row for row, and keep the same copies (``held``)."""
    rng = np.random.default_rng(seed)
    layouts = [object() for _ in range(LAYOUTS)]
    prices = rng.integers(0, 4, (2, LAYOUTS, LAYOUTS)).astype(float)  # zeros: moves that cost nothing
    sizes = rng.integers(1, 100, (2, LAYOUTS)).astype(float)
    made = []
    for blocks in (False, True):
        model, reads = LinearModel(), Reads()
        src = one_hot(model)
        reads.add("w", 1, layouts[0], layouts[1], 5.0, [(src[0], 1), (src[1], 0.5)], site=3)  # another value
        for r in range(2):
            cells = transport(model, src, one_hot(model))
            if blocks:
                reads.add_block(Block("v", 1, tuple(layouts), tuple(layouts), prices[r], cells, 2 * r, sizes[r]))
            else:
                for s, t in itertools.product(range(LAYOUTS), repeat=2):
                    reads.add("v", 1, layouts[s], layouts[t], prices[r, s, t], [(int(cells[s, t]), 1)], 2 * r,
                              sizes[r, t])
            reads.add("v", 1, layouts[r], layouts[2], 7.0, [(src[r], 1)], site=5)  # the source's binaries
        reads.price(model)
        held = reads.held(model, [0, 9, 2, 8, 3, 5, 7])
        made.append((_as_arrays(model), held))
    (old, old_held), (new, new_held) = made
    assert len(old["maxima"]) > 0  # some pair is read more than once
    for k in old:
        assert np.array_equal(old[k], new[k]), k
    assert old_held == new_held and old_held  # a copy kept across the ops between its readers
