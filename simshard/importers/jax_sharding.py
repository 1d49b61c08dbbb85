"""JAX's meshes and shardings as simshard's: ``jax.sharding.Mesh`` / ``AbstractMesh`` to ``Mesh``,
``NamedSharding`` / ``PartitionSpec`` to ``NamedSharding`` / ``P``.

Read by duck typing (``axis_names``, ``axis_sizes``, ``axis_types``, ``spec``), so this module
imports no jax: jax is optional and only the importer's entry point loads it.
"""

from __future__ import annotations

from ..errors import ShardingError
from ..sharding.dims import NamedSharding
from ..sharding.mesh import AxisType, Mesh
from ..sharding.partition_spec import UNCONSTRAINED, P


def convert_mesh(jax_mesh) -> Mesh:
    """The simshard mesh of a JAX mesh: same axis names, sizes and types, and the same device order
    where the mesh holds devices numbered 0..n-1 (host devices are)."""
    names = tuple(str(n) for n in jax_mesh.axis_names)
    sizes = tuple(int(s) for s in jax_mesh.axis_sizes)
    types = tuple(AxisType[getattr(t, "name", str(t))] for t in getattr(jax_mesh, "axis_types", ()) or ())
    ids = None
    try:
        devices = jax_mesh.devices
    except (AttributeError, ValueError):  # an AbstractMesh holds no devices
        devices = None
    if devices is not None and not isinstance(devices, (str, bytes)):
        found = [int(getattr(d, "id", -1)) for d in getattr(devices, "flat", ())]
        if sorted(found) == list(range(len(found))) and len(found) == _product(sizes):
            ids = found
    return Mesh(list(zip(names, sizes)), ids, axis_types=types or None)


def _product(sizes) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def convert_spec(jax_spec) -> P:
    """A JAX PartitionSpec as simshard's ``P`` (None, an axis, a tuple of axes or UNCONSTRAINED)."""
    entries = []
    for e in tuple(jax_spec):
        if e is None or isinstance(e, str):
            entries.append(e)
        elif isinstance(e, (tuple, list)):
            entries.append(tuple(str(a) for a in e))
        elif "UNCONSTRAINED" in repr(e).upper():
            entries.append(UNCONSTRAINED)
        else:
            raise ShardingError("invalid-spec", f"the JAX PartitionSpec entry {e!r} (in {jax_spec}) has no simshard spelling")
    unreduced = getattr(jax_spec, "unreduced", None)
    return P(*entries, unreduced=set(unreduced)) if unreduced else P(*entries)


def is_jax_unspecified(sharding) -> bool:
    """JAX's "no sharding given" markers (``UnspecifiedValue``, ``AUTO``, None)."""
    return sharding is None or type(sharding).__name__ in ("UnspecifiedValue", "AUTO")


def convert_sharding(sharding, where: str) -> NamedSharding | None:
    """A JAX sharding as simshard's NamedSharding; None where JAX states none. A sharding other
    than a NamedSharding (a device placement, a GSPMD sharding) is a ShardingError naming ``where``."""
    if is_jax_unspecified(sharding):
        return None
    mesh, spec = getattr(sharding, "mesh", None), getattr(sharding, "spec", None)
    if mesh is None or spec is None:
        if type(sharding).__name__ == "SingleDeviceSharding":
            return None
        raise ShardingError("invalid-spec", f"{where}: JAX sharding {sharding!r} is not a NamedSharding; "
                            "simshard imports NamedShardings (mesh and PartitionSpec)")
    return NamedSharding(convert_mesh(mesh), convert_spec(spec))
