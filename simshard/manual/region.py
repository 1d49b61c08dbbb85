"""The ``shard_map`` op (a region: a per-device body Program and its specs) and ``shard_map``,
which traces a body on local shapes into one; the stack of regions being traced.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Sequence

import numpy as np
import optree

from ..errors import ShardingError
from ..ir.program import Aval
from ..ops import register_op
from ..sharding.dims import Sharding
from ..sharding.layout import layout
from ..sharding.mesh import Mesh
from ..sharding.partition_spec import P
from ..tracing.state import as_tracer
from ..tracing.tracer import ShapeDtype, Tracer, bind, resolve_sharding, trace
from .collectives import opaque_rule, run_region
from .replication import check_replication


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
    "shard_map", _region_eval, _region_kernel, opaque_rule,
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
            check_replication(body, mesh, shardings, out_sh, getattr(f, "__name__", "shard_map"))
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


def region_mesh(fn: str) -> Mesh:
    """The mesh of the innermost shard_map being traced (``fn`` names the caller that needs one)."""
    if not _MANUAL:
        raise ShardingError("not-in-manual-region", f"{fn} names mesh axes and only works inside shard_map")
    return _MANUAL[-1]
