"""Input generators for the ops explicit mode adds (``dynamic_slice``, ``dynamic_update_slice``,
``argsort``), registered into ``test_rules_by_execution``'s table so that its property test checks
their factor rules by sharded execution like every other op's."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import simshard.lax  # noqa: F401  (registers the ops)
from test_rules_by_execution import FLOATS, _rng, generator, shapes, signed_values


def _starts(draw, shape, sizes):
    # beyond the clamp range too: the kernel clamps like XLA
    return [np.asarray(draw(st.integers(0, n + 1)), dtype=np.int32) for n, k in zip(shape, sizes)]


@generator("dynamic_slice")
@st.composite
def _dynamic_slice(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    sizes = tuple(n if draw(st.booleans()) else draw(st.integers(0, n)) for n in shape)
    x = signed_values(rng, shape, draw(st.sampled_from(FLOATS)))
    return [x, *_starts(draw, shape, sizes)], {"slice_sizes": sizes}


@generator("dynamic_update_slice")
@st.composite
def _dynamic_update_slice(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    sizes = tuple(n if draw(st.booleans()) else draw(st.integers(0, n)) for n in shape)
    dt = draw(st.sampled_from(FLOATS))
    x, u = signed_values(rng, shape, dt, 0), signed_values(rng, sizes, dt, 1)
    return [x, u, *_starts(draw, shape, sizes)], {}


@generator("argsort")
@st.composite
def _argsort(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    x = signed_values(rng, shape, draw(st.sampled_from(FLOATS + (np.int32,))))
    return [x], {"axis": draw(st.integers(0, len(shape) - 1)), "index_dtype": np.dtype(np.int32)}
