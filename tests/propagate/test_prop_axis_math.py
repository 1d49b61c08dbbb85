"""Axis arithmetic: containment, prefix, overlap, coexistence, prefix without overlap, merging."""

import pytest

from prop_helpers import ax, axes
from simshard.propagate import axis_math as am

SIZES = {"x": 8, "y": 4, "z": 6}


def test_full_axis_contains_its_sub_axes():
    assert am.contains(ax("x"), ax("x:(2)2"), SIZES)
    assert not am.contains(ax("x:(2)2"), ax("x"), SIZES)
    assert not am.contains(ax("x"), ax("y"), SIZES)


@pytest.mark.parametrize(
    "a, b, expected",
    [("x:(1)2", "x", True), ("x:(1)2", "x:(1)4", True), ("x:(2)2", "x", False), ("x", "x", True), ("x:(1)4", "x:(1)2", False)],
)
def test_prefix_of_needs_the_same_start(a, b, expected):
    assert am.prefix_of(ax(a), ax(b), SIZES) is expected


def test_overlap_is_interval_intersection():
    assert am.overlaps(ax("x:(1)4"), ax("x:(2)2"), SIZES)
    assert not am.overlaps(ax("x:(1)2"), ax("x:(2)4"), SIZES)
    assert am.overlaps(ax("x"), ax("x:(4)2"), SIZES)
    assert not am.overlaps(ax("x"), ax("y"), SIZES)


def test_sub_axes_from_different_splits_cannot_coexist():
    # z=6: (1)2 and (1)3 are not one split of the axis
    assert not am.can_coexist(ax("z:(1)2"), ax("z:(1)3"), SIZES)
    assert am.can_coexist(ax("z:(1)2"), ax("z:(2)3"), SIZES)
    assert am.can_coexist(ax("x"), ax("x:(2)2"), SIZES)


def test_prefix_without_overlap_keeps_the_major_part():
    assert am.prefix_without_overlap(ax("x"), ax("x:(4)2"), SIZES) == ax("x:(1)4")
    assert am.prefix_without_overlap(ax("x:(2)4"), ax("x:(1)2"), SIZES) == ax("x:(2)4")  # disjoint
    assert am.prefix_without_overlap(ax("x:(2)4"), ax("x:(1)4"), SIZES) is None
    assert am.prefix_without_overlap(ax("x"), ax("y"), SIZES) == ax("x")


def test_greatest_common_prefix_of_lists():
    assert am.common_prefix_list(axes("x", "y"), axes("x", "z"), SIZES) == axes("x")
    assert am.common_prefix_list(axes("x:(1)2", "y"), axes("x"), SIZES) == axes("x:(1)2")
    assert am.common_prefix_list(axes("y", "x"), axes("x", "y"), SIZES) == []


def test_consecutive_sub_axes_merge_into_the_full_axis():
    out = axes("y", "x:(1)2")
    am.add_or_merge(out, ax("x:(2)4"), SIZES)
    assert out == axes("y", "x")
    am.add_or_merge(out, ax("z:(1)2"), SIZES)
    assert out == axes("y", "x", "z:(1)2")


@pytest.mark.parametrize(
    "first, second, status",
    [
        ([], [], am.Prefix.EQUAL),
        ([], ["x"], am.Prefix.STRICT),
        (["x"], ["x", "y"], am.Prefix.STRICT),
        (["x:(1)2"], ["x"], am.Prefix.STRICT),
        (["x:(1)2"], ["x", "y"], am.Prefix.STRICT),
        (["x", "y"], ["x", "y"], am.Prefix.EQUAL),
        (["x", "z"], ["x", "y"], am.Prefix.NOT),
        (["x:(1)2", "y"], ["x", "y"], am.Prefix.NOT),
        (["x", "y"], ["x"], am.Prefix.NOT),
    ],
)
def test_axis_list_prefix_status(first, second, status):
    assert am.list_prefix(axes(*first), axes(*second), SIZES) is status
