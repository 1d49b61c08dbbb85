"""``MeshShardingHelper``: a mesh plus ``sjit``, scalax's jit with sharding rules.

``sjit(fun, ...)`` returns an ``SJitted``: ``.trace(*args)`` gives the simshard Program (the
rules matched against the actual arguments, concrete arrays or ``ShapeDtype``s, and against the
traced outputs), and calling it evaluates the program like ``ss.jit``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import optree

from ..errors import ShardingError
from ..sharding.mesh import Mesh, make_mesh
from ..sharding.partition_spec import P
from ..sharding.dims import NamedSharding
from .annotations import sharding_context
from .match import match
from .global_array import GlobalArray
from .pytree import leaves_with_paths, register_dataclasses_in
from .sjit import SJitted, UnusedAnnotationWarning, as_tuple  # noqa: F401  (UnusedAnnotationWarning: importable from its old home)


class MeshShardingHelper:
    """A named device mesh and the scalax-style ``sjit`` over it.

    ``axis_dims`` may hold one -1, inferred from ``devices`` (a count or a list of device ids;
    simshard has no devices of its own to count, so it must be given then). Without -1 the mesh
    has ``prod(axis_dims)`` devices. ``mesh_axis_splitting`` matters when ``physical_shape`` is
    given: logical axes are built from whole physical dimensions, and splitting one is refused
    unless allowed (see ``ss.make_mesh``).
    """

    def __init__(
        self,
        axis_dims: Sequence[int],
        axis_names: Sequence[str],
        mesh_axis_splitting: bool = False,
        *,
        devices: int | Sequence[int] | None = None,
        physical_shape: Sequence[int] | None = None,
        name: str = "mesh",
    ):
        self._mesh = make_mesh(
            axis_dims, axis_names, devices=devices, physical_shape=physical_shape,
            mesh_axis_splitting=mesh_axis_splitting, name=name,
        )
        self.axis_dims = self._mesh.axis_sizes
        self.axis_names = self._mesh.axis_names
        self.mesh_axis_splitting = bool(mesh_axis_splitting)

    @property
    def mesh(self) -> Mesh:
        return self._mesh

    def __repr__(self) -> str:
        return f"MeshShardingHelper({list(self.axis_dims)}, {list(self.axis_names)})"

    def get_context(self, annotation_shardings: Mapping[str, Any] | None = None):
        """A context in which with_sharding_constraint / with_sharding_annotation use this mesh."""
        return sharding_context(self.mesh, annotation_shardings)

    # -- rules -----------------------------------------------------------------------------------
    def match_sharding_rule(self, sharding_rules, pytree):
        """The concrete shardings ``sharding_rules`` give ``pytree`` on this mesh.

        ``sharding_rules`` is a ShardingRule, a P, None, or a pytree of those that is a prefix of
        ``pytree``. Returns a pytree of ``pytree``'s structure holding a NamedSharding per leaf
        (None where the rule says None: no sharding asked for).
        """
        register_dataclasses_in(pytree)
        matched, treedef = match(as_tuple(sharding_rules), pytree, self.mesh, "match_sharding_rule",
                                 expected_mesh=self.mesh)
        return optree.tree_unflatten(treedef, [m.named for m in matched])

    # -- jit -------------------------------------------------------------------------------------
    def sjit(
        self,
        fun: Callable,
        in_shardings=None,
        out_shardings=None,
        static_argnums=(),
        args_sharding_constraint=None,
        annotation_shardings: Mapping[str, Any] | None = None,
        *,
        sharding_annotation_rules: Mapping[str, Any] | None = None,
    ) -> "SJitted":
        """scalax's ``sjit``: ``fun`` with shardings given as rules, specs or None per argument.

        ``sharding_annotation_rules`` is the older scalax name of ``annotation_shardings``.
        """
        if sharding_annotation_rules is not None:
            if annotation_shardings is not None:
                raise TypeError("sjit: give annotation_shardings or sharding_annotation_rules, not both")
            annotation_shardings = sharding_annotation_rules
        return SJitted(self, fun, in_shardings, out_shardings, static_argnums, args_sharding_constraint,
                       annotation_shardings)

    sharded_jit = sjit

    # -- data ------------------------------------------------------------------------------------
    def local_data_to_global_array(self, pytree, batch_axis: int = 0, mesh_axis_subset=None):
        """Host-local batches as global arrays sharded along ``batch_axis``.

        scalax concatenates every host's batch into one global ``jax.Array``. simshard simulates a
        single host holding every device: the global array is the local array itself, returned as
        a ``GlobalArray`` carrying ``NamedSharding(mesh, P(None, ..., axes))`` with the axes at
        ``batch_axis`` (all mesh axes, or ``mesh_axis_subset``). The batch dimension must divide
        evenly over those axes. (scalax's own spec puts ``batch_axis - 1`` Nones before the axes,
        so it shards dimension 0 for batch_axis 0 and 1 alike; here the axes go at ``batch_axis``.)
        """
        if mesh_axis_subset is None:
            axes = tuple(self.axis_names)
        else:
            axes = (mesh_axis_subset,) if isinstance(mesh_axis_subset, str) else tuple(mesh_axis_subset)
            for a in axes:
                if a not in self.axis_names:
                    raise ShardingError(
                        "unknown-axis",
                        f"local_data_to_global_array: mesh_axis_subset names axis {a!r}, which is not in the "
                        f"mesh (axes: {', '.join(self.axis_names)})",
                        axis=a,
                    )
            dup = [a for a in set(axes) if axes.count(a) > 1]
            if dup:
                raise ShardingError(
                    "duplicate-axis", f"local_data_to_global_array: axis {dup[0]!r} appears twice in mesh_axis_subset",
                    axis=dup[0],
                )
        count = math.prod(self.mesh.shape[a] for a in axes)
        entry = axes[0] if len(axes) == 1 else (axes or None)

        def to_global(path: str, leaf):
            arr = np.asarray(leaf)
            if not -arr.ndim <= batch_axis < arr.ndim:
                raise ShardingError(
                    "rank-mismatch",
                    f"local_data_to_global_array: leaf {path!r} has shape {arr.shape}, no batch_axis {batch_axis}",
                )
            ax = batch_axis % arr.ndim
            if arr.shape[ax] % count:
                raise ShardingError(
                    "uneven-batch",
                    f"local_data_to_global_array: leaf {path!r} has {arr.shape[ax]} rows on batch_axis {ax}, "
                    f"not divisible by the {count} devices of mesh axes {axes}",
                    dim=ax,
                )
            return GlobalArray(arr, NamedSharding(self.mesh, P(*([None] * ax), entry)))

        paths, leaves, treedef = leaves_with_paths(pytree)
        return optree.tree_unflatten(treedef, [to_global(p, x) for p, x in zip(paths, leaves)])
