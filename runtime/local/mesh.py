"""``LocalMesh``: the local backend's counterpart of ``RayMesh``, every device in this process.

The same compile-once / run-again API (``compile``, ``put``, DeviceArrays in and out), so a
training loop written for a ``RayMesh`` runs here unchanged, and quickly: a device's shard is an
array of this process (read-only, as a Ray object is), a run is ``run_local``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..calls.compiled import Compiled, compile_on, put
from ..core.collectives import check_algorithm
from .backend import run_local


class LocalMesh:
    """Every device of ``mesh`` as an asyncio task of this process (see the module docstring)."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.devices = tuple(int(d) for d in mesh.device_ids)
        self._keys = itertools.count()
        self._loaded: dict[Any, dict] = {}  # key -> run options

    def __enter__(self) -> "LocalMesh":
        return self

    def __exit__(self, *exc) -> None:
        self._loaded.clear()

    def load(self, spmd, *, device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct") -> int:
        check_algorithm(algorithm)
        missing = sorted(set(spmd.devices) - set(self.devices))
        if missing:
            raise ValueError(f"the program has schedules for devices {missing}, which this LocalMesh does not hold")
        key = next(self._keys)
        self._loaded[key] = dict(device_memory=device_memory, timeout=timeout, algorithm=algorithm)
        return key

    def execute(self, key, spmd, inputs, *, trace_values: bool = False, retries: int = 0):
        return run_local(spmd, inputs, trace_values=trace_values, **self._loaded[key])

    def compile(self, f, *args, **options) -> Compiled:
        """As ``RayMesh.compile``."""
        return compile_on(self, f, *args, **options)

    def put(self, x, sharding=None):
        """As ``RayMesh.put``: DeviceArrays whose shards are read-only arrays of this process."""
        return put(self, x, sharding)

    def put_shards(self, blocks) -> dict[int, np.ndarray]:
        out = {}
        for d, block in blocks.items():
            out[d] = np.array(block, copy=True)
            out[d].flags.writeable = False
        return out

    def fetch(self, handles: list) -> list:
        return list(handles)


__all__ = ["LocalMesh"]
