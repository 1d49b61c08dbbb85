"""The collectives a region body calls (JAX's names): each binds its op with the size of the
group it runs over, on the mesh of the region being traced.
"""

from __future__ import annotations

import optree

from ..errors import ShardingError
from ..tracing.state import as_tracer
from ..tracing.tracer import bind
from .groups import group_size
from .region import region_mesh


def _collective_bind(op: str, x, axis_name, **params):

    mesh = region_mesh(op)
    return bind(op, as_tracer(x), axis_name=axis_name, size=group_size(mesh, axis_name), **params)


def psum(x, axis_name):
    return optree.tree_map(lambda v: _collective_bind("psum", v, axis_name), x)


def pmax(x, axis_name):
    return optree.tree_map(lambda v: _collective_bind("pmax", v, axis_name), x)


def pmin(x, axis_name):
    return optree.tree_map(lambda v: _collective_bind("pmin", v, axis_name), x)


def all_gather(x, axis_name, *, axis=0, tiled=False):
    return _collective_bind("all_gather", x, axis_name, axis=axis, tiled=tiled)


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False):
    return _collective_bind("psum_scatter", x, axis_name, scatter_dimension=scatter_dimension, tiled=tiled)


def ppermute(x, axis_name, perm):
    perm = tuple((int(s), int(d)) for s, d in perm)
    n = group_size(region_mesh("ppermute"), axis_name)
    if len({d for _, d in perm}) != len(perm) or len({s for s, _ in perm}) != len(perm) or any(not (0 <= s < n and 0 <= d < n) for s, d in perm):
        raise ShardingError("invalid-permutation", f"ppermute: {list(perm)} is not a partial permutation of 0..{n - 1}")
    return _collective_bind("ppermute", x, axis_name, perm=perm)


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False):
    return _collective_bind("all_to_all", x, axis_name, split_axis=split_axis, concat_axis=concat_axis, tiled=tiled)


def axis_index(axis_name):
    mesh = region_mesh("axis_index")
    return bind("axis_index", axis_name=axis_name, size=group_size(mesh, axis_name))
