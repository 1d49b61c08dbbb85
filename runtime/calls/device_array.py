"""Arrays that live on the devices: each device holds its own shard, the driver only handles.

``devices.put(x, sharding)`` (on a ``RayMesh`` or a ``LocalMesh``) shards a global array once and
returns a ``DeviceArray``; a compiled program takes DeviceArrays whose sharding is its input's and
hands each device its shard as it is (a Ray object reference, so the bytes go from the object
store to the device, never through the driver), and its result's ``arrays`` are DeviceArrays of
the outputs, still on the devices. ``np.asarray(arr)`` / ``arr.gather()`` assembles the global
array through ``simshard.sharding.layout``, the one place that says which device holds what. A
training loop keeps its parameters on the devices between steps this way, as JAX's arrays do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from simshard.sharding.layout import equivalent, layout

from ..core.placement import output_shapes


@dataclass(frozen=True, eq=False)
class DeviceArray:
    """A global array of ``shape`` and ``dtype``, sharded by ``sharding`` (None: every device
    holds the whole array), each device's shard in ``shards`` (device -> a handle that
    ``fetch`` turns into arrays: a Ray ObjectRef, or the array itself on the local backend)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    sharding: Any
    shards: Mapping[int, Any]
    fetch: Callable[[list], list] = lambda handles: list(handles)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted(self.shards))

    def shard(self, device: int) -> np.ndarray:
        """The block ``device`` holds."""
        return np.asarray(self.fetch([self.shards[device]])[0])

    def gather(self) -> np.ndarray:
        """The global array, assembled from every device's shard (one fetch for all of them)."""
        devices = self.devices
        got = dict(zip(devices, (np.asarray(a) for a in self.fetch([self.shards[d] for d in devices]))))
        if self.sharding is None:
            return np.array(got[devices[0]], copy=True)
        return layout(self.sharding, self.shape).assemble(got)

    def __array__(self, dtype=None, copy=None):
        a = self.gather()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray({np.dtype(self.dtype).name}{list(self.shape)}, {self.sharding}, on {len(self.shards)} devices)"


def place(x, sharding, devices, put: Callable, fetch: Callable) -> DeviceArray:
    """``x`` sharded by ``sharding`` (a Sharding, or None for every device a whole copy): ``put``
    takes every device's block (device -> array) and gives its handles (device -> handle)."""
    x = np.asarray(x)
    if sharding is None:
        return DeviceArray(x.shape, x.dtype, None, put({d: x for d in devices}), fetch)
    blocks = layout(sharding, x.shape).shard(x)
    missing = sorted(set(devices) - set(blocks))
    if missing:
        raise ValueError(f"the sharding {sharding} places nothing on devices {missing}")
    return DeviceArray(x.shape, x.dtype, sharding, put({d: blocks[d] for d in devices}), fetch)


def matches(arr: DeviceArray, sharding, where: Callable[[], str]) -> None:
    """A DeviceArray handed to a program whose input ``where()`` names expects ``sharding``: it must
    lay out the same way (nothing is moved behind the user's back); a ValueError naming both
    otherwise (the name made only then: a program's labels are searched for it)."""
    if arr.sharding == sharding:  # the common case, without laying either out
        return
    same = (arr.sharding is not None and sharding is not None and equivalent(arr.sharding, sharding, arr.shape))
    if not same:
        raise ValueError(
            f"{where()} is a DeviceArray sharded {arr.sharding}, but the program takes it sharded {sharding}: "
            "put it again with that sharding (devices.put(np.asarray(arr), sharding)), or compile the program "
            "with the array's sharding")


def output_arrays(spmd, handles: Mapping[int, list], fetch: Callable) -> tuple[DeviceArray, ...]:
    """The program's outputs as DeviceArrays over each device's output handles."""
    out = []
    for i, shape in enumerate(output_shapes(spmd)):
        v = spmd.program.outputs[i]
        out.append(DeviceArray(tuple(shape), np.dtype(v.aval.dtype), spmd.out_shardings[i],
                               {d: handles[d][i] for d in spmd.devices}, fetch))
    return tuple(out)
