"""Manual regions (``shard_map``): a body written per device, with its collectives explicit.

``ss.shard_map(f, mesh=..., in_specs=..., out_specs=...)`` traces ``f`` once on local shapes into
a body Program and records one ``shard_map`` equation. Inside the body, ``psum``, ``pmax``,
``pmin``, ``all_gather``, ``psum_scatter``, ``ppermute``, ``all_to_all`` and ``axis_index`` are
ops like any other, named after JAX's. The reference evaluation runs the body on every device in
lockstep: ordinary ops per device, collectives across each group, reductions in ascending
coordinate order.

One job per module: ``groups`` (device groups), ``collectives`` (the collective ops and the
lockstep reference evaluation), ``region`` (the ``shard_map`` op and ``shard_map``),
``replication`` (``check_rep``), ``primitives`` (``psum`` and the other collectives a body calls).
"""

from .collectives import COLLECTIVES, opaque_rule, run_region
from .groups import axes_of, group_size, groups
from .primitives import all_gather, all_to_all, axis_index, pmax, pmin, ppermute, psum, psum_scatter
from .region import region_mesh, shard_map


__all__ = [
    "COLLECTIVES", "all_gather", "all_to_all", "axes_of", "axis_index", "group_size", "groups", "opaque_rule", "pmax",
    "pmin", "ppermute", "psum", "psum_scatter", "region_mesh", "run_region", "shard_map",
]
