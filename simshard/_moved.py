"""Module paths from before the compiler was split into one package per stage, still importable.

``import simshard.mesh`` (and every other path in ``MOVED``) loads the module's new home under
the old name, with a ``DeprecationWarning`` naming the new path; docs/architecture.md lists the
moves. Three old modules share their name with a function of the package root (``ss.trace``,
``ss.layout``, ``ss.show``); importing a submodule binds it on its parent, which would replace
the function, so those three are entered in ``sys.modules`` up front, as they were before.

``PUBLIC`` paths are not moves but public names of modules that live in the runtime
(``simshard.dtensor`` is ``simshard.runtime.dtensor``): found the same way, on first import,
without a warning, so the compiler's modules never import the runtime.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {  # old module -> its new home; a package's submodules move with it
    "simshard.axes": "simshard.sharding.axes",
    "simshard.convert": "simshard.sharding.convert",
    "simshard.layout": "simshard.sharding.layout",
    "simshard.mesh": "simshard.sharding.mesh",
    "simshard.partition_spec": "simshard.sharding",  # P and NamedSharding now live in two modules
    "simshard.placements": "simshard.sharding.placements",
    "simshard.ragged": "simshard.sharding.ragged",
    "simshard.reduce_ops": "simshard.sharding.reduce_ops",
    "simshard.show": "simshard.sharding.show",
    "simshard.syntax": "simshard.sharding.syntax",
    "simshard.program": "simshard.ir.program",
    "simshard.context": "simshard.tracing.context",
    "simshard.explicit": "simshard.tracing.explicit",
    "simshard.explicit.scatter": "simshard.tracing.scatter",
    "simshard.interpret": "simshard.tracing.interpret",
    "simshard.lowering": "simshard.tracing.lowering",
    "simshard.prepare": "simshard.propagate.prepare",
    "simshard.report.units": "simshard.units",
    # the runtime by job (docs/architecture.md); modules split in two keep a re-exporting file
    # at their old path instead (runtime/transport.py, ray_mesh.py, ray_actor.py, ray_transport.py)
    "simshard.runtime.api": "simshard.runtime.front.api",
    "simshard.runtime.collectives": "simshard.runtime.core.collectives",
    "simshard.runtime.comm_debug": "simshard.runtime.calls.comm_debug",
    "simshard.runtime.compiled": "simshard.runtime.calls.compiled",
    "simshard.runtime.device_array": "simshard.runtime.calls.device_array",
    "simshard.runtime.dtensor": "simshard.runtime.front.dtensor",
    "simshard.runtime.executor": "simshard.runtime.core.executor",
    "simshard.runtime.gc_policy": "simshard.runtime.core.gc_policy",
    "simshard.runtime.local_mesh": "simshard.runtime.local.mesh",
    "simshard.runtime.nodes": "simshard.runtime.ray.nodes",
    "simshard.runtime.placement": "simshard.runtime.core.placement",
    "simshard.runtime.ray_start": "simshard.runtime.ray.start",
    "simshard.runtime.redistribute": "simshard.runtime.front.redistribute",
    "simshard.runtime.user_entries": "simshard.runtime.ray.user_entries",
}
PUBLIC = {"simshard.dtensor": "simshard.runtime.front.dtensor_api"}  # public path -> the runtime module it names
SHADOWED = {"simshard.trace": "simshard.tracing.tracer", "simshard.layout": "simshard.sharding.layout",
            "simshard.show": "simshard.sharding.show"}


def new_home(name: str) -> str | None:
    """Where the module once called ``name`` lives now, or None if it did not move."""
    for old in sorted(MOVED, key=len, reverse=True):  # the longest old path that names it
        if name == old or name.startswith(old + "."):
            return MOVED[old] + name[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new home (executed once, under its new name)."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.own_spec  # the import system stamped the alias spec on it


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths in ``MOVED`` and the ``PUBLIC`` ones (see the module docstring)."""

    def find_spec(self, name, path=None, target=None):
        if name in PUBLIC:
            return importlib.util.spec_from_loader(name, _Alias(PUBLIC[name]))
        new = new_home(name)
        if new is None:
            return None
        warnings.warn(f"{name} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)
        return importlib.util.spec_from_loader(name, _Alias(new))


def install() -> None:
    """Enter the shadowed paths in ``sys.modules`` and find the others on demand."""
    for old, new in SHADOWED.items():
        sys.modules.setdefault(old, importlib.import_module(new))
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())  # before the path finder, which would load a moved
        # package's submodules a second time under the old name
