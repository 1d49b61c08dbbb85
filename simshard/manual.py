"""Manual regions (``shard_map``): a body written per device, with its collectives explicit.

``ss.shard_map(f, mesh=..., in_specs=..., out_specs=...)`` traces ``f`` once on local shapes into
a body Program and records one ``shard_map`` equation. Inside the body, ``psum``, ``pmax``,
``pmin``, ``all_gather``, ``psum_scatter``, ``ppermute``, ``all_to_all`` and ``axis_index`` are
ops like any other, named after JAX's. The reference evaluation runs the body on every device in
lockstep: ordinary ops per device, collectives across each group, reductions in ascending
coordinate order.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Callable, Sequence

import numpy as np
import optree

from .errors import ShardingError
from .sharding.layout import layout
from .sharding.mesh import Mesh
from .ops import get_op, register_op
from .ops.factors import FactorRule
from .ir.program import Aval, Literal, Program
from .sharding.reduce_ops import REDUCE_OPS
from .sharding.dims import Sharding
from .sharding.partition_spec import P
from .tracing.state import as_tracer
from .tracing.tracer import ShapeDtype, Tracer, bind, resolve_sharding, trace

# -- device groups --------------------------------------------------------------------------------
def axes_of(axis_name) -> tuple[str, ...]:
    """The mesh axes a collective's ``axis_name`` names (one name or several), as a tuple."""
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


_axes = axes_of  # the old name, imported by partition/regions.py until it moves to axes_of


def groups(mesh: Mesh, axis_name) -> list[tuple[int, ...]]:
    """Devices that differ only along ``axis_name`` (one name or several), each group ordered by
    its coordinate along those axes (row-major in the order given)."""
    names = axes_of(axis_name)
    for n in names:
        if n not in mesh.axis_names:
            raise ShardingError("unknown-axis", f'collective over axis "{n}", which mesh @{mesh.name} does not have', axis=n)
    idx = [mesh.axis_names.index(n) for n in names]
    out: dict[tuple, list[tuple[tuple, int]]] = {}
    for d in mesh.device_ids:
        c = mesh.coords(d)
        key = tuple(v for i, v in enumerate(c) if i not in idx)
        out.setdefault(key, []).append((tuple(c[i] for i in idx), d))
    return [tuple(d for _, d in sorted(g)) for g in out.values()]


def group_size(mesh: Mesh, axis_name) -> int:
    return math.prod(mesh.axis_size(n) for n in axes_of(axis_name))


# -- collective ops (abstract evaluation only; they run in `run_region`) ----------------------------
def _not_outside(name):
    def kernel(*_, **__):
        raise RuntimeError(f"{name} only runs inside a shard_map region")

    return kernel


def _opaque_rule(in_avals, out_avals, **_):
    """Collectives and regions: every dim its own factor that must stay whole."""
    factors, operands, results, kinds = [], [], [], []
    for group, avals in ((operands, in_avals), (results, out_avals)):
        for a in avals:
            dims = []
            for n in a.shape:
                f = f"f{len(factors)}"
                factors.append((f, n))
                kinds.append((f, "need_replication"))
                dims.append((f,))
            group.append(tuple(dims))
    return FactorRule(tuple(factors), tuple(operands), tuple(results), tuple(kinds))


def _same(x: Aval, **_):
    return (x,)


def _all_gather_eval(x: Aval, *, axis_name, size, axis=0, tiled=False):
    shape = list(x.shape)
    if tiled:
        shape[axis] *= size
    else:
        shape.insert(axis, size)
    return (Aval(tuple(shape), x.dtype),)


def _psum_scatter_eval(x: Aval, *, axis_name, size, scatter_dimension=0, tiled=False):
    shape = list(x.shape)
    if shape[scatter_dimension] % size if tiled else shape[scatter_dimension] != size:
        raise ValueError(
            f"psum_scatter: dim {scatter_dimension} of size {shape[scatter_dimension]} does not fit a group of {size}"
        )
    if tiled:
        shape[scatter_dimension] //= size
    else:
        shape.pop(scatter_dimension)
    return (Aval(tuple(shape), x.dtype),)


def _all_to_all_eval(x: Aval, *, axis_name, size, split_axis, concat_axis, tiled=False):
    """As jax.lax.all_to_all: tiled divides split_axis and multiplies concat_axis by the group
    size; untiled needs split_axis == group size, drops it and inserts a group axis at concat_axis."""
    shape = list(x.shape)
    if tiled:
        if shape[split_axis] % size:
            raise ValueError(f"all_to_all: split axis {split_axis} of size {shape[split_axis]} is not divisible by {size}")
        shape[split_axis] //= size
        shape[concat_axis] *= size
    else:
        if shape[split_axis] != size:
            raise ValueError(f"all_to_all: untiled split axis {split_axis} has size {shape[split_axis]}, the group has {size}")
        shape.pop(split_axis)
        shape.insert(concat_axis, size)
    return (Aval(tuple(shape), x.dtype),)


def _axis_index_eval(*, axis_name, size):
    return (Aval((), np.int32),)


for _name, _eval in [
    ("psum", _same), ("pmax", _same), ("pmin", _same), ("ppermute", _same),
    ("all_gather", _all_gather_eval), ("psum_scatter", _psum_scatter_eval),
    ("all_to_all", _all_to_all_eval), ("axis_index", _axis_index_eval),
]:
    register_op(_name, _eval, _not_outside(_name), _opaque_rule, doc=f"manual-region collective {_name}", region_only=True)

_REDUCE = {"psum": "sum", "pmax": "max", "pmin": "min"}


def _collective(op: str, values: list[np.ndarray], kw: dict, mesh: Mesh, devices: list[int]) -> list[np.ndarray]:
    """Run one collective for every device (values in device order); returns per-device results."""
    where = {d: i for i, d in enumerate(devices)}
    out: list[np.ndarray | None] = [None] * len(devices)
    for g in groups(mesh, kw["axis_name"]):
        xs = [values[where[d]] for d in g]
        n = len(g)
        if op in _REDUCE:
            r = REDUCE_OPS[_REDUCE[op]].reduce(xs)
            res = [r] * n
        elif op == "all_gather":
            joined = np.concatenate(xs, axis=kw["axis"]) if kw["tiled"] else np.stack(xs, axis=kw["axis"])
            res = [joined] * n
        elif op == "psum_scatter":
            total = REDUCE_OPS["sum"].reduce(xs)
            ax = kw["scatter_dimension"]
            parts = np.split(total, n, axis=ax)
            res = parts if kw["tiled"] else [np.squeeze(p, axis=ax) for p in parts]
        elif op == "ppermute":
            res = [np.zeros_like(xs[0]) for _ in g]
            for src, dst in kw["perm"]:
                res[dst] = xs[src]
        elif op == "all_to_all":
            sa, ca = kw["split_axis"], kw["concat_axis"]
            chunks = [np.split(x, n, axis=sa) for x in xs]
            if kw["tiled"]:
                res = [np.concatenate([chunks[src][dst] for src in range(n)], axis=ca) for dst in range(n)]
            else:
                res = [np.stack([np.squeeze(chunks[src][dst], axis=sa) for src in range(n)], axis=ca) for dst in range(n)]
        else:  # pragma: no cover - guarded by COLLECTIVES
            raise AssertionError(op)
        for d, r in zip(g, res):
            out[where[d]] = np.asarray(r)
    return out  # type: ignore[return-value]


COLLECTIVES = frozenset(["psum", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute", "all_to_all"])


def run_region(body: Program, mesh: Mesh, per_device_inputs: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Evaluate a region body on every device in lockstep; inputs and results are [device][value]."""
    devices = list(mesh.device_ids)
    envs = [dict(zip(body.inputs, ins)) for ins in per_device_inputs]
    for e in body.eqns:
        kw = e.kw
        args = [[i.value if isinstance(i, Literal) else env[i] for i in e.inputs] for env in envs]
        if e.op in COLLECTIVES:
            outs = _collective(e.op, [a[0] for a in args], kw, mesh, devices)
            results = [(o,) for o in outs]
        elif e.op == "axis_index":
            results = []
            for d in devices:
                names = axes_of(kw["axis_name"])
                idx = 0
                for n in names:
                    idx = idx * mesh.shape[n] + mesh.axis_index(d, n)
                results.append((np.int32(idx),))
        else:
            op = get_op(e.op)
            results = [op.kernel(*a, **kw) for a in args]
        for env, res in zip(envs, results):
            for v, r in zip(e.outputs, res):
                env[v] = r
    return [[env[v] for v in body.outputs] for env in envs]


# -- the region op --------------------------------------------------------------------------------
def _region_eval(*avals, body, mesh, in_specs, out_specs, check_rep=True):
    return tuple(Aval(_global_shape(v.aval.shape, s), v.aval.dtype) for v, s in zip(body.outputs, out_specs))


def _global_shape(local: Sequence[int], spec: Sharding) -> tuple[int, ...]:
    return tuple(n * spec.shard_count(d) for d, n in enumerate(local))


def _region_kernel(*arrays, body, mesh, in_specs, out_specs, check_rep=True):
    per_device = [[] for _ in mesh.device_ids]
    for a, spec in zip(arrays, in_specs):
        shards = layout(spec, a.shape).shard(a)
        for i, d in enumerate(mesh.device_ids):
            per_device[i].append(shards[d])
    results = run_region(body, mesh, per_device)
    outs = []
    for k, (v, spec) in enumerate(zip(body.outputs, out_specs)):
        lay = layout(spec, _global_shape(v.aval.shape, spec))
        outs.append(lay.assemble({d: results[i][k] for i, d in enumerate(mesh.device_ids)}))
    return tuple(outs)


register_op(
    "shard_map", _region_eval, _region_kernel, _opaque_rule,
    doc="manual region: per-device body with explicit collectives", region_only=True,
)


# -- user API ---------------------------------------------------------------------------------------
def _spec_to_sharding(spec, mesh: Mesh, rank: int, where: str) -> Sharding:

    s = resolve_sharding(spec, Aval((0,) * rank, np.float32), where, mesh) if spec is not None else Sharding.replicated_on(mesh, rank)
    if s.mesh != mesh:
        raise ShardingError("wrong-mesh", f"{where}: sharding on mesh @{s.mesh.name}, region runs on @{mesh.name}")
    return s


def shard_map(f: Callable, *, mesh: Mesh, in_specs, out_specs, check_rep: bool = True) -> Callable:
    """Run ``f`` per device on its local blocks; its collectives name mesh axes."""

    @functools.wraps(f)
    def wrapped(*args):

        xs = [as_tracer(a) for a in optree.tree_leaves(args)]
        specs = in_specs if isinstance(in_specs, (list, tuple)) and not _is_spec(in_specs) else (in_specs,) * len(xs)
        if len(specs) != len(xs):
            raise ShardingError("structure-mismatch", f"shard_map: {len(specs)} in_specs for {len(xs)} arguments")
        shardings = [_spec_to_sharding(s, mesh, x.ndim, f"shard_map in_specs[{i}]") for i, (s, x) in enumerate(zip(specs, xs))]
        local = []
        for i, (x, s) in enumerate(zip(xs, shardings)):
            shape = []
            for d, n in enumerate(x.shape):
                k = s.shard_count(d)
                if n % k:
                    raise ShardingError(
                        "uneven-manual-region",
                        f"shard_map argument {i}: dim {d} of size {n} is not divisible by {k} ({s}); manual regions need even blocks",
                        dim=d,
                    )
                shape.append(n // k)
            local.append(ShapeDtype(tuple(shape), x.dtype))
        flat = all(isinstance(a, Tracer) or np.ndim(a) == 0 or isinstance(a, np.ndarray) for a in args)
        body_fn = f if flat else (lambda *a: f(*optree.tree_unflatten(optree.tree_structure(args), list(a))))
        with _manual(mesh):
            body = trace(body_fn, *local, mesh=mesh)
        outs_local = body.outputs
        ospecs = out_specs if isinstance(out_specs, (list, tuple)) and not _is_spec(out_specs) else (out_specs,) * len(outs_local)
        if len(ospecs) != len(outs_local):
            raise ShardingError("structure-mismatch", f"shard_map: {len(ospecs)} out_specs for {len(outs_local)} results")
        out_sh = tuple(_spec_to_sharding(s, mesh, v.aval.ndim, f"shard_map out_specs[{i}]") for i, (s, v) in enumerate(zip(ospecs, outs_local)))
        if check_rep:
            _check_replication(body, mesh, shardings, out_sh, getattr(f, "__name__", "shard_map"))
        res = bind("shard_map", *xs, body=body, mesh=mesh, in_specs=tuple(shardings), out_specs=out_sh)
        res = res if isinstance(res, tuple) else (res,)
        return optree.tree_unflatten(body.out_tree, list(res))

    # ``wraps`` names the region after ``f`` and keeps its parameter names (input names), but ``f``
    # is the per-device body, not this function of global arrays: don't advertise it as wrapped
    # (``ss.run`` would verify against the body run on global arrays).
    try:
        wrapped.__signature__ = inspect.signature(f)
    except (TypeError, ValueError):  # a callable without one: names become arg0, arg1, ...
        pass
    del wrapped.__wrapped__
    return wrapped


# -- replication checking (JAX's check_rep) ---------------------------------------------------------
# How each collective changes the mesh axes a value is the same along (replicated): a reduction or
# gather over axes makes it so; a scatter, permute or all-to-all over them makes it vary; an
# ordinary op is replicated where all its operands are.
_MAKES_REPLICATED = {"psum", "pmax", "pmin", "all_gather"}
_MAKES_VARYING = {"psum_scatter", "ppermute", "all_to_all"}


def _replicated_axes(body: Program, mesh: Mesh, in_specs: Sequence[Sharding]) -> dict:
    """Per body value, the mesh axes along which every device holds the same data."""
    every = frozenset(mesh.axis_names)
    rep: dict = {}
    for v, s in zip(body.inputs, in_specs):
        rep[v] = every - {a.name for d in s.dims for a in d.axes}  # replicated where its spec does not split it
    for e in body.eqns:
        ins = [rep[i] for i in e.inputs if not isinstance(i, Literal)]
        r = frozenset.intersection(*ins) if ins else every
        axes = frozenset(axes_of(e.kw["axis_name"])) if "axis_name" in e.kw else frozenset()
        if e.op in _MAKES_REPLICATED:
            r = r | axes
        elif e.op in _MAKES_VARYING:
            r = r - axes
        elif e.op == "axis_index":
            r = every - axes
        for o in e.outputs:
            rep[o] = r
    return rep


def _check_replication(body: Program, mesh: Mesh, in_specs, out_specs, name: str) -> None:
    """A trace-time ShardingError where ``out_specs`` claims an output is replicated along axes the
    body does not make it so (it would assemble from devices holding different data)."""
    rep = _replicated_axes(body, mesh, in_specs)
    for k, (v, spec) in enumerate(zip(body.outputs, out_specs)):
        named = {a.name for d in spec.dims for a in d.axes} | {a.name for a in spec.unreduced}
        claimed = [a for a in mesh.axis_names if a not in named]
        varying = [a for a in claimed if a not in rep.get(v, frozenset(mesh.axis_names))]
        if varying:
            axes = ", ".join(f'"{a}"' for a in varying)
            raise ShardingError(
                "replication-check",
                f"shard_map region {name!r}: output {k} is declared replicated over mesh axes {axes} "
                f"(its out_specs, {spec}, does not name them) but the body computes it differently on the devices "
                f"along them; a psum (or all_gather) over {axes} is likely missing, or name the axes in out_specs. "
                "check_rep=False skips this check",
                axis=varying[0],
            )


def _is_spec(x) -> bool:

    return isinstance(x, P)


_MANUAL: list[Mesh] = []


class _manual:
    def __init__(self, mesh):
        self.mesh = mesh

    def __enter__(self):
        _MANUAL.append(self.mesh)

    def __exit__(self, *exc):
        _MANUAL.pop()


def _region_mesh(fn: str) -> Mesh:
    if not _MANUAL:
        raise ShardingError("not-in-manual-region", f"{fn} names mesh axes and only works inside shard_map")
    return _MANUAL[-1]


def _collective_bind(op: str, x, axis_name, **params):

    mesh = _region_mesh(op)
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
    n = group_size(_region_mesh("ppermute"), axis_name)
    if len({d for _, d in perm}) != len(perm) or len({s for s, _ in perm}) != len(perm) or any(not (0 <= s < n and 0 <= d < n) for s, d in perm):
        raise ShardingError("invalid-permutation", f"ppermute: {list(perm)} is not a partial permutation of 0..{n - 1}")
    return _collective_bind("ppermute", x, axis_name, perm=perm)


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False):
    return _collective_bind("all_to_all", x, axis_name, split_axis=split_axis, concat_axis=concat_axis, tiled=tiled)


def axis_index(axis_name):

    mesh = _region_mesh("axis_index")
    return bind("axis_index", axis_name=axis_name, size=group_size(mesh, axis_name))
