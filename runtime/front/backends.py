"""The backends ``ss.run`` can run a partitioned program on, by name: what each is, the keyword
options it takes, and how to run a program on it.

A backend is a function of the partitioned program and each device's input shards to an
``Execution``; ``local`` runs every device in this process (``runtime/local/``), ``ray`` on Ray
device processes (``runtime/ray/``, imported when first used: the local backend needs no Ray).
A new backend is one more ``Backend`` here.
"""

from __future__ import annotations

import inspect
import os
from typing import Callable, NamedTuple


class Backend(NamedTuple):
    """A backend: ``runners()`` are the functions whose keyword options ``ss.run`` passes on to it
    (read off their signatures); ``run(spmd, inputs, **how)`` runs a program on it."""

    name: str
    runners: Callable[[], tuple]
    run: Callable
    own: frozenset  # keywords ``ss.run`` sets itself, not passed on from the user


# the keywords ss.run sets, never taken from the user's backend options
_SET_BY_RUN = frozenset({"spmd", "inputs", "mesh", "device_memory", "timeout", "trace_values", "progress", "devices"})


def _local_runners() -> tuple:
    from ..local.backend import run_local

    return (run_local,)


def _run_local(spmd, inputs, *, mesh=None, progress=None, **how):
    from ..local.backend import run_local

    (progress or (lambda stage: None))(f"running on {len(spmd.devices)} devices in this process")
    return run_local(spmd, inputs, **how)


def _ray_runners() -> tuple:
    from ..ray.driver.mesh import RayMesh  # Ray's modules load on first use
    from ..ray.driver.run import run_ray

    return (run_ray, RayMesh.__init__)


def _run_ray(spmd, inputs, **how):
    from ..ray.driver.run import run_ray  # Ray's modules load on first use

    return run_ray(spmd, inputs, **how)


BACKENDS = {
    "local": Backend("local", _local_runners, _run_local, _SET_BY_RUN | {"address", "node_axes"}),
    "ray": Backend("ray", _ray_runners, _run_ray, _SET_BY_RUN),
}


def backend_named(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"ss.run: unknown backend {name!r} (available: {', '.join(map(repr, BACKENDS))})") from None


def options_of(name: str) -> frozenset[str]:
    """The keywords ``ss.run`` passes on to backend ``name``: its runners' own options, read off
    their signatures."""
    backend = backend_named(name)
    names = {p.name for r in backend.runners() for p in inspect.signature(r).parameters.values()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return frozenset(names - backend.own - {"self"})


def default_backend() -> str:
    """``ray`` unless ``SIMSHARD_BACKEND`` names another backend."""
    return os.environ.get("SIMSHARD_BACKEND", "ray")
