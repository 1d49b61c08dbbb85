"""The collective ops of manual regions (``psum``, ``all_gather``, ``ppermute``, ...): their
abstract evaluation and registration, and ``run_region``, the reference evaluation of a region
body on every device in lockstep (ordinary ops per device, collectives across each group).
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval, Literal, Program
from ..ops import get_op, register_op
from ..ops.factors import FactorRule
from ..sharding.mesh import Mesh
from ..sharding.reduce_ops import REDUCE_OPS
from .groups import axes_of, groups


def _not_outside(name):
    def kernel(*_, **__):
        raise RuntimeError(f"{name} only runs inside a shard_map region")

    return kernel


def opaque_rule(in_avals, out_avals, **_):
    """The factor rule of collectives and regions: every dim its own factor that must stay whole
    (propagation goes around them, never through)."""
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
    register_op(_name, _eval, _not_outside(_name), opaque_rule, doc=f"manual-region collective {_name}", region_only=True)

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
