"""PyTorch's shardings as simshard's: DTensor placements (``Shard``, ``Replicate``, ``Partial``,
PyTorch's objects or simshard's), ``DeviceMesh`` to ``Mesh``, and ``parallelize_module`` plans
(``ColwiseParallel``, ``RowwiseParallel``) as the placements they give a module's parameters.

Read by class name and attributes, so this module imports no torch.
"""

from __future__ import annotations

import fnmatch
from typing import Mapping

from ..errors import ShardingError
from ..sharding.mesh import Mesh
from ..sharding.placements import Partial, Replicate, Shard


def convert_mesh(mesh) -> Mesh:
    """A simshard mesh as is; a torch ``DeviceMesh`` as the mesh of its dim names and sizes."""
    if isinstance(mesh, Mesh):
        return mesh
    names = getattr(mesh, "mesh_dim_names", None)
    shape = tuple(int(s) for s in getattr(mesh, "shape", ()))
    if not names or not shape:
        raise ShardingError("invalid-mesh", f"mesh {mesh!r} is neither a simshard Mesh nor a DeviceMesh with dim names")
    return Mesh(list(zip(names, shape)))


def convert_placement(p):
    """One DTensor placement (PyTorch's or simshard's) as simshard's."""
    kind = type(p).__name__
    if kind in ("Shard", "_StridedShard") and hasattr(p, "dim"):
        return p if isinstance(p, Shard) else Shard(int(p.dim))
    if kind == "Replicate":
        return Replicate()
    if kind in ("Partial", "_Partial"):
        return p if isinstance(p, Partial) else Partial()
    return p  # text or a sharding spelling: read by the trace (sharding.spelling)


def convert_placements(spec):
    """A placement list (PyTorch's or simshard's objects) as simshard's; any other spelling as is."""
    if isinstance(spec, (list, tuple)) and spec and all(hasattr(p, "is_shard") or type(p).__name__ in
                                                        ("Shard", "Replicate", "Partial") for p in spec):
        return [convert_placement(p) for p in spec]
    return spec


# a plan's style -> the placement of (Linear weight, Linear bias, Embedding weight) on the plan's axis
_STYLES = {
    "ColwiseParallel": (Shard(0), Shard(0), Shard(1)),
    "RowwiseParallel": (Shard(1), Replicate(), Shard(0)),
}


def plan_placements(module, plan: Mapping[str, object], mesh: Mesh, axis: str | None = None) -> dict[str, list]:
    """The parameters' placements a ``parallelize_module`` plan gives (``{"fc1": ColwiseParallel(), ...}``,
    module paths or patterns with ``*``), over mesh axis ``axis`` (default: the last), replicated
    over the others: ``{"fc1.weight": [Shard(0)], ...}``."""
    axis = axis or mesh.axis_names[-1]
    if axis not in mesh.axis_names:
        raise ShardingError("unknown-axis", f"plan axis {axis!r} is not an axis of mesh {mesh.axis_names}", axis=axis)
    k = mesh.axis_names.index(axis)
    out: dict[str, list] = {}
    modules = dict(module.named_modules())
    for pattern, style in plan.items():
        name = type(style).__name__
        if name not in _STYLES:
            raise ShardingError("invalid-spec", f"plan entry {pattern!r}: {name} is not imported (ColwiseParallel, "
                                "RowwiseParallel are); give its parameters' placements instead")
        matched = [m for m in modules if m and fnmatch.fnmatchcase(m, pattern)]
        if not matched:
            raise ShardingError("invalid-spec", f"plan entry {pattern!r} names no submodule of {type(module).__name__}")
        for path in matched:
            out.update(_module_placements(path, modules[path], _STYLES[name], len(mesh.axis_names), k))
    return out


def _module_placements(path: str, sub, style, ndim: int, k: int) -> dict[str, list]:
    weight, bias, embedding = style
    kinds = {c.__name__ for c in type(sub).__mro__}  # subclasses too (MultiheadAttention's out_proj)
    kind = "Embedding" if "Embedding" in kinds else "Linear" if "Linear" in kinds else type(sub).__name__
    chosen = {"weight": embedding} if kind == "Embedding" else {"weight": weight, "bias": bias}
    if kind not in ("Linear", "Embedding"):
        raise ShardingError("invalid-spec", f"plan entry {path!r} is a {kind}; the plans shard Linear and Embedding")
    out = {}
    for pname, placement in chosen.items():
        if getattr(sub, pname, None) is None:
            continue
        row = [Replicate()] * ndim
        row[k] = placement
        out[f"{path}.{pname}"] = row
    return out
