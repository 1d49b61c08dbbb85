"""The planner's checks on boxes agree with its checks on index arrays.

Flat layouts carry their blocks as ranges (``Layout.boxes``), and ``realize`` checks a move and
counts its bytes on those with numpy; where the boxes do not show a claim it asks the index
arrays. The same reshard planned with and without boxes must give the same steps, bytes and
per-device instructions."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib

from hypothesis import HealthCheck, given, settings

from simshard.partition.reshard import plan as plan_module
from simshard.partition.reshard import planner as reshard_module
from simshard.partition.reshard import plan_reshard

from .helpers import reshard_cases

dims_module = importlib.import_module("simshard.sharding.dims")
layout_module = importlib.import_module("simshard.sharding.layout")  # the package exports a function of that name

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _clear_caches():
    reshard_module._cached.cache_clear()
    layout_module.clear_layout_cache()  # the layouts the partitioner and the estimate share
    plan_module._PER_LAYOUT.clear()


@contextlib.contextmanager
def _without_boxes():
    """Flat layouts without their boxes: every check and count on the index arrays."""
    flat = layout_module.flat_layout

    def arrays_only(s, shape):
        return dataclasses.replace(flat(s, shape), boxes=None)

    _clear_caches()
    dims_module.flat_layout = arrays_only
    try:
        yield
    finally:
        dims_module.flat_layout = flat
        _clear_caches()


def _summary(plan):
    out = []
    for s in plan.steps:
        data = dict(s.data) if hasattr(s.data, "codes") else s.data
        if s.kind == "exchange":
            data = [(r.sources.tolist(), r.targets.tolist(), r.piece.tolist(), r.pieces, r.starts.tolist(), r.sizes.tolist())
                    for r in s.data.rounds]
        out.append((s.kind, s.dim, s.tgt_dim, s.axes, s.groups, dict(s.received), dict(s.sent), dict(s.minimum), data))
    return out


@SETTINGS
@given(reshard_cases())
def test_a_plan_on_boxes_equals_the_plan_on_index_arrays(case):
    _, shape, src, dst = case
    _clear_caches()
    assert layout_module.layout(src, shape).boxes is not None
    on_boxes = _summary(plan_reshard(src, dst, shape))
    with _without_boxes():
        assert layout_module.layout(src, shape).boxes is None
        on_arrays = _summary(plan_reshard(src, dst, shape))
    assert on_boxes == on_arrays


def test_an_empty_block_sits_where_its_dim_ends_so_a_gather_shows_on_boxes():
    """3 rows over 4 devices are blocks [0,1), [1,2), [2,3) and an empty one at [3,3): the blocks
    follow one another, so gathering them is shown on the boxes, with the same bytes as on the
    arrays (the empty device receives all 3 rows, the others 2)."""
    from simshard import Mesh
    from simshard.sharding.dims import Sharding
    from simshard.sharding.dim_sharding import DimSharding

    mesh = Mesh({"y": 4})
    src = Sharding(mesh, (DimSharding(("y",)),))
    dst = Sharding(mesh, (DimSharding(()),))
    _clear_caches()
    assert layout_module.layout(src, (3,)).boxes.lo[:, 0].tolist() == [0, 1, 2, 3]
    plan = plan_reshard(src, dst, (3,))
    assert [s.kind for s in plan.steps] == ["all_gather"]
    assert plan.steps[0].received == {0: 8, 1: 8, 2: 8, 3: 12}
    with _without_boxes():
        assert _summary(plan_reshard(src, dst, (3,))) == _summary(plan)
