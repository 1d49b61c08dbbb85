"""The budgeted search's start (``autoshard.incumbent``) on small programs, against the
enumeration of every strategy: the layout family splits every op over the whole mesh, and the
start fits, costs no less than the optimum and no more than the family where the family fits."""

from __future__ import annotations

import pytest

from simshard.autoshard import incumbent
from simshard.autoshard.candidates import split_axes
from simshard.autoshard.exhaustive import exhaustive, peak_bytes
from simshard.autoshard.model import SCALE

from .test_exhaustive import peak_range, search

pytest.importorskip("scipy")


def whole(op, c: int, axes: set) -> bool:
    """Whether candidate ``c`` of ``op`` puts every split axis on one factor."""
    assignment = op.candidates[c].assignment
    return len(assignment) == 1 and set(assignment[0][1]) == axes


@pytest.mark.parametrize("name", ["mlp", "matmul-2d", "scan"])
def test_the_family_splits_every_op_that_can_over_the_whole_mesh(name):
    s = search(name)
    axes = set(split_axes(s.mesh))
    allowed = incumbent.whole_mesh(s)
    family = incumbent.unbudgeted_family(s, None)
    split = 0
    for op in s.ops:
        can = [whole(op, c, axes) for c in range(len(op.vars))]
        assert [bool(allowed[v]) for v in op.vars] == (can if any(can) else [True] * len(can))
        chosen = [c for c, v in enumerate(op.vars) if family.values[v] > 0.5]
        assert len(chosen) == 1 and (whole(op, chosen[0], axes) or not any(can))
        split += any(can)
    assert split >= len(s.ops) // 2  # most ops have such a split: the family is a real restriction
    assert family.objective >= s.model.solve().objective * (1 - 1e-12)  # a restriction of the unbudgeted search


@pytest.mark.parametrize("name", ["mlp", "matmul-2d", "scan"])
@pytest.mark.parametrize("where", [0.0, 0.2, 0.5, 0.8])
def test_the_start_fits_and_is_no_worse_than_the_family(name, where):
    low, high = peak_range(search(name))
    budget = int(low + where * (high - low))
    s = search(name, budget)
    best = exhaustive(s, budget)
    first, proven = incumbent.start(s, None)
    family = incumbent.fixed(s, s.family.values, None)
    assert first is not None or family is None
    if first is not None:
        assert peak_bytes(s, first.values) <= budget
        assert first.objective / SCALE >= best.seconds * (1 - 1e-9)
    if family is not None:  # the family fits: the start is it or better
        assert peak_bytes(s, family.values) <= budget
        assert first.objective <= family.objective * (1 + 1e-12)
    if proven:
        assert first.objective / SCALE == pytest.approx(best.seconds, rel=1e-9, abs=1e-15)
