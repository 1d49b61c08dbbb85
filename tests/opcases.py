"""Random cases for every registered op: inputs, params, meshes and factor assignments (hypothesis).

Shared by the property tests that check each op's sharding rule by execution
(tests/ops/test_rules_by_execution.py) and each derivative rule by execution
(tests/transforms/test_every_derivative.py). ``GENERATORS[op](mesh)`` is a strategy drawing
``(arrays, params)`` for one op; ``assignments`` draws a valid assignment of mesh axes to its rule's
factors.

Inputs are integer-valued floats (or ints), so every sum is exact whatever its order. Values are
never zero (no signed-zero ambiguity in partial sums) and, as in DTensor's strategy validator,
carry a sign-varying offset (``a + s*(|a|+1)``, the sign alternating along the flat index and
shifted per operand) with 60/40-weighted magnitudes (positive entries x3, negative x2): partial
sums over different blocks differ and do not cancel, so a rule that drops, double-counts or
mis-combines a block cannot pass by accident.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np
from hypothesis import strategies as st

import simshard.lax  # noqa: F401  (registers every op, explicit mode's too)
import simshard.ops  # noqa: F401
from simshard import Mesh, Sharding
from simshard.ops.check import project, shardable_factors
from simshard.ops.elementwise import BINARY, UNARY

FLOATS = (np.float32, np.float64)

# -- values ------------------------------------------------------------------------------------


def signed_values(rng: np.random.Generator, shape, dtype=np.float32, idx: int = 0) -> np.ndarray:
    """Non-zero integers with alternating-sign offsets and 60/40-weighted magnitudes."""
    a = rng.integers(-4, 5, size=shape)
    flat = np.arange(a.size).reshape(a.shape)
    s = np.where((flat + idx) % 2 == 0, -1, 1)
    v = a + s * (np.abs(a) + 1)
    v = np.where(v > 0, 3 * v, 2 * v)
    return v.astype(dtype)


def prod_values(rng: np.random.Generator, shape, dtype=np.float32, idx: int = 0) -> np.ndarray:
    """+-1 and +-2 only: products stay exact powers of two."""
    flat = np.arange(math.prod(shape)).reshape(shape)
    s = np.where((flat + idx) % 2 == 0, -1, 1)
    return (s * rng.choice([1, 2], size=shape)).astype(dtype)


# -- strategies --------------------------------------------------------------------------------
DIMS = st.sampled_from([1, 2, 3, 4, 5, 6, 7])


def shapes(min_rank=0, max_rank=3, dims=DIMS):
    return st.lists(dims, min_size=min_rank, max_size=max_rank).map(tuple)


@st.composite
def meshes(draw):
    n = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    return Mesh(list(zip("xyz", sizes)))


@st.composite
def assignments(draw, rule, in_shapes, out_shapes, mesh, result_only=False):
    """A random assignment the checker accepts: factors in random order, each given no axes,
    1-2 random free axes, or 1-2 free axes dividing its size (so compound dims get fully sharded
    major factors), kept when the projection stays valid."""
    cands = shardable_factors(rule, in_shapes, out_shapes, result_only=result_only)
    sizes = rule.sizes
    out: dict[str, tuple[str, ...]] = {}
    for f in draw(st.permutations(cands)):
        used = {a for axes in out.values() for a in axes}
        free = [a for a in mesh.axis_names if a not in used]
        options = [o for k in (1, 2) for o in itertools.permutations(free, k)]
        even = [o for o in options if sizes[f] % math.prod(mesh.shape[a] for a in o) == 0]
        how = draw(st.sampled_from(["none", "any", "even", "even"]))
        pool = {"none": [], "any": options, "even": even}[how]
        if not pool:
            continue
        trial = {**out, f: draw(st.sampled_from(pool))}
        try:
            project(rule, in_shapes, out_shapes, mesh, trial)
        except ValueError:
            continue
        out = trial
    return out


GENERATORS: dict[str, Callable] = {}
RESULT_ONLY = {"broadcast_in_dim", "iota", "full", "constant"}  # build result-only blocks from params


def generator(*names):
    def register(fn):
        for n in names:
            GENERATORS[n] = lambda mesh, fn=fn, n=n: fn(n, mesh)
        return fn

    return register


def _rng(draw) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "invert"}  # integer-only ops


@st.composite
def _unary(draw, name, mesh):
    rng, shape, dt = _rng(draw), draw(shapes()), draw(st.sampled_from(FLOATS))
    if name in BITWISE:
        return [rng.integers(-50, 50, size=shape).astype(np.int32)], {}
    x = signed_values(rng, shape, dt)
    if name in ("log", "sqrt", "rsqrt", "log1p", "reciprocal"):
        x = np.abs(x)
    return [x], {}


@st.composite
def _binary(draw, name, mesh):
    rng, shape, dt = _rng(draw), draw(shapes()), draw(st.sampled_from(FLOATS))
    x, y = signed_values(rng, shape, dt, 0), signed_values(rng, shape, dt, 1)
    if name in BITWISE:
        x, y = (rng.integers(-50, 50, size=shape).astype(np.int32) for _ in range(2))
    if name == "pow":
        y = rng.integers(0, 4, size=shape).astype(dt)
    scalar = draw(st.sampled_from([None, 0, 1]))
    if scalar == 0:
        x = x.reshape(-1)[:1].reshape(()) if x.size else dt(3)
    elif scalar == 1:
        y = y.reshape(-1)[:1].reshape(()) if y.size else dt(2)
    return [x, y], {}


for _n in UNARY:
    generator(_n)(_unary)
for _n in BINARY:
    generator(_n)(_binary)


@generator("select")
@st.composite
def _select(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes())
    pred = rng.integers(0, 2, size=shape).astype(bool)
    if draw(st.booleans()):
        pred = np.asarray(bool(draw(st.booleans())))
    return [pred, signed_values(rng, shape, np.float32, 0), signed_values(rng, shape, np.float32, 1)], {}


@generator("convert")
@st.composite
def _convert(draw, name, mesh):
    rng = _rng(draw)
    x = signed_values(rng, draw(shapes()), draw(st.sampled_from(FLOATS + (np.int32,))))
    return [x], {"dtype": np.dtype(draw(st.sampled_from(["float32", "float64", "int32", "int64"])))}


@generator("dot_general")
@st.composite
def _dot(draw, name, mesh):
    rng = _rng(draw)
    nb, nc = draw(st.integers(0, 1)), draw(st.integers(0, 2))
    nl, nr = draw(st.integers(0, 2)), draw(st.integers(0, 1))
    batch = draw(st.lists(DIMS, min_size=nb, max_size=nb))
    contract = draw(st.lists(DIMS, min_size=nc, max_size=nc))
    lfree = draw(st.lists(DIMS, min_size=nl, max_size=nl))
    rfree = draw(st.lists(DIMS, min_size=nr, max_size=nr))
    lhs_items = [("b", i) for i in range(nb)] + [("l", i) for i in range(nl)] + [("c", i) for i in range(nc)]
    rhs_items = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("r", i) for i in range(nr)]
    lhs_items, rhs_items = draw(st.permutations(lhs_items)), draw(st.permutations(rhs_items))
    size = {"b": batch, "c": contract, "l": lfree, "r": rfree}
    lhs = signed_values(rng, tuple(size[k][i] for k, i in lhs_items), np.float32, 0)
    rhs = signed_values(rng, tuple(size[k][i] for k, i in rhs_items), np.float32, 1)
    pos = lambda items, kind, i: items.index((kind, i))  # noqa: E731
    contracting = (tuple(pos(lhs_items, "c", i) for i in range(nc)), tuple(pos(rhs_items, "c", i) for i in range(nc)))
    batch_dims = (tuple(pos(lhs_items, "b", i) for i in range(nb)), tuple(pos(rhs_items, "b", i) for i in range(nb)))
    return [lhs, rhs], {"contracting": contracting, "batch": batch_dims}


@generator("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
@st.composite
def _reduce(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    dt = draw(st.sampled_from(FLOATS + (np.int32,)))
    x = (prod_values if name == "reduce_prod" else signed_values)(rng, shape, dt)
    axes = tuple(draw(st.permutations(range(len(shape))))[: draw(st.integers(0, len(shape)))])
    return [x], {"axes": axes}


@generator("argmax", "argmin")
@st.composite
def _argminmax(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    return [signed_values(rng, shape, np.float32)], {
        "axis": draw(st.integers(0, len(shape) - 1)),
        "index_dtype": np.dtype(draw(st.sampled_from(["int32", "int64"]))),
    }


@generator("cumsum", "sort")
@st.composite
def _along_axis(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    return [signed_values(rng, shape, draw(st.sampled_from(FLOATS + (np.int32,))))], {"axis": draw(st.integers(0, len(shape) - 1))}


@st.composite
def factorization(draw, n: int, max_rank: int = 4):
    """A random shape with ``n`` elements (size-1 dims included)."""
    primes, m, p = [], n, 2
    while m > 1:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    rank = draw(st.integers(max(1 if n > 1 else 0, 0), max_rank))
    if rank == 0:
        return ()
    dims = [1] * rank
    for q in primes:
        dims[draw(st.integers(0, rank - 1))] *= q
    return tuple(dims)


@generator("reshape")
@st.composite
def _reshape(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(0, 3))
    new_shape = draw(factorization(math.prod(shape)))
    return [signed_values(rng, shape, draw(st.sampled_from(FLOATS + (np.int32,))))], {"new_shape": new_shape}


@generator("transpose")
@st.composite
def _transpose(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(0, 4))
    return [signed_values(rng, shape, np.float32)], {"perm": tuple(draw(st.permutations(range(len(shape)))))}


@generator("broadcast_in_dim")
@st.composite
def _broadcast(draw, name, mesh):
    rng, out = _rng(draw), draw(shapes(0, 4))
    dims = draw(st.permutations(range(len(out))))[: draw(st.integers(0, len(out)))]
    if draw(st.booleans()):
        dims = sorted(dims)
    in_shape = tuple(draw(st.sampled_from([out[d], 1])) for d in dims)
    return [signed_values(rng, in_shape, np.float32)], {"shape": out, "broadcast_dimensions": tuple(dims)}


@generator("concatenate")
@st.composite
def _concat(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    axis, k = draw(st.integers(0, len(shape) - 1)), draw(st.integers(1, 3))
    xs = []
    for t in range(k):
        s = list(shape)
        s[axis] = draw(st.integers(1, 5))
        xs.append(signed_values(rng, tuple(s), draw(st.sampled_from(FLOATS + (np.int32,))), t))
    return xs, {"axis": axis}


@generator("slice")
@st.composite
def _slice(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(0, 3))
    start, limit, strides = [], [], []
    for n in shape:
        if draw(st.booleans()):
            start.append(0), limit.append(n), strides.append(1)
            continue
        s = draw(st.integers(0, n))
        start.append(s), limit.append(draw(st.integers(s, n))), strides.append(draw(st.integers(1, 3)))
    return [signed_values(rng, shape, np.float32)], {"start": tuple(start), "limit": tuple(limit), "strides": tuple(strides)}


@generator("pad")
@st.composite
def _pad(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(0, 3))
    widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) if draw(st.booleans()) else (0, 0) for _ in shape)
    return [signed_values(rng, shape, np.float32)], {"padding_value": float(draw(st.integers(-3, 3))), "widths": widths}


@generator("take")
@st.composite
def _take(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(1, 3))
    axis = draw(st.integers(0, len(shape) - 1))
    ishape = draw(shapes(0, 2))
    indices = rng.integers(0, shape[axis], size=ishape).astype(draw(st.sampled_from([np.int32, np.int64])))
    return [signed_values(rng, shape, np.float32), indices], {"axis": axis}


@generator("iota")
@st.composite
def _iota(draw, name, mesh):
    shape = draw(shapes(1, 3))
    return [], {
        "shape": shape,
        "dimension": draw(st.integers(0, len(shape) - 1)),
        "dtype": np.dtype(draw(st.sampled_from(["int32", "float32"]))),
    }


@generator("full")
@st.composite
def _full(draw, name, mesh):
    return [], {
        "shape": draw(shapes(0, 3)),
        "fill_value": draw(st.integers(-5, 5)),
        "dtype": np.dtype(draw(st.sampled_from(["int32", "float32", "float64"]))),
    }


@generator("constant")
@st.composite
def _constant(draw, name, mesh):
    return [], {"value": signed_values(_rng(draw), draw(shapes(0, 3)), np.float32)}


@generator("sharding_constraint", "reshard")
@st.composite
def _annotation(draw, name, mesh):
    rng, shape = _rng(draw), draw(shapes(0, 3))
    axes = list(mesh.axis_names)
    target = Sharding(mesh, tuple((axes.pop(),) if axes and draw(st.booleans()) else () for _ in shape))
    return [signed_values(rng, shape, np.float32)], {"sharding": target}


@generator("stop_gradient")
@st.composite
def _identity(draw, name, mesh):
    rng, shape, dt = _rng(draw), draw(shapes()), draw(st.sampled_from(FLOATS))
    return [signed_values(rng, shape, dt)], {}


@generator("propagation_barrier")
@st.composite
def _barrier(draw, name, mesh):
    rng = _rng(draw)
    direction = draw(st.sampled_from(["NONE", "FORWARD", "BACKWARD", "BOTH"]))
    return [signed_values(rng, draw(shapes()), np.float32)], {"allowed_direction": direction}


@generator("conv2d")
@st.composite
def _conv(draw, name, mesh):
    rng = _rng(draw)
    n, c, o = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    stride, padding, spatial, kernel = [], [], [], []
    for _ in range(2):
        # "whole": one window over the whole dim, the one shardable window reduction; the other
        # modes have window factors whose sizes may multiply exactly yet do not describe blocks.
        mode = draw(st.sampled_from(["whole", "whole_front_padded", "tiled", "general"]))
        if mode == "whole":
            s = draw(st.integers(1, 3))
            h = k = draw(st.integers(1, 5))
            pad = (0, draw(st.integers(0, s - 1)))
        elif mode == "whole_front_padded":
            s = draw(st.integers(2, 3))
            h = k = draw(st.integers(1, 5))
            lo = draw(st.integers(1, s - 1))
            pad = (lo, draw(st.integers(0, s - 1 - lo)))
        elif mode == "tiled":  # non-overlapping windows: stride == window, dim == windows * window
            k = s = draw(st.integers(1, 4))
            h, pad = k * draw(st.integers(1, 3)), (0, 0)
        else:
            s, h = draw(st.integers(1, 3)), draw(st.integers(1, 7))
            pad = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
            k = draw(st.integers(1, h + sum(pad)))
        spatial.append(h), kernel.append(k), stride.append(s), padding.append(pad)
    x = signed_values(rng, (n, c, *spatial), np.float32, 0)
    w = signed_values(rng, (o, c, *kernel), np.float32, 1)
    return [x, w], {"stride": tuple(stride), "padding": tuple(padding)}


# -- the ops explicit mode adds (dynamic_slice, dynamic_update_slice, argsort) -----------------


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
