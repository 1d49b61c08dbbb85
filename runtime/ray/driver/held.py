"""The driver's handles on arrays a device process keeps: ``Held`` (one array) and
``HeldOutputs`` (a run's output shards by device, fetched on first access)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import numpy as np

from ...errors import DeviceLostError
from ..start import import_ray


class Held:
    """The driver's handle on an array a device's host process keeps (a run's output): passed to a
    later run of the same device it stays where it is; ``RayMesh.fetch`` brings it here. When the
    last handle goes, the array is released (batched into the mesh's next call on that host)."""

    __slots__ = ("host", "id", "released")

    def __init__(self, host, id: int, released: dict):
        self.host, self.id, self.released = host, id, released

    def __del__(self):
        try:
            self.released.setdefault(self.host, []).append(self.id)
        except Exception:  # interpreter shutdown
            pass


def lost_kinds() -> tuple:
    """What a fetch from a process that died raises: Ray's error for a dead actor, or the broken
    control line's."""
    return import_ray().exceptions.RayActorError, ConnectionError


def who_said(cause: BaseException) -> str:
    """Who reported a process dead: Ray (its actor error) or the driver (its control line broke)."""
    return "Ray said" if type(cause).__module__.startswith("ray") else "The driver saw"


def outputs_lost(device: int, cause: BaseException) -> DeviceLostError:
    return DeviceLostError(
        f"device {device}'s Ray actor died after the run, and its output shards with it (they stay on "
        f"the device until fetched): run the program again (RayMesh.repair() restarts the device; "
        f"retries= does it for you). {who_said(cause)}: {type(cause).__name__}",
        device=device, lost=(device,),
    )


class HeldOutputs(Mapping):
    """device -> its output shards, kept by its host process and fetched from it on first access
    (``fetch``: ``HeldArrays.fetch_held``)."""

    def __init__(self, held: Mapping[int, list], fetch: Callable[[list], list]):
        self._held = dict(held)
        self._fetch = fetch
        self._got: dict[int, tuple[np.ndarray, ...]] = {}

    def __getitem__(self, device: int) -> tuple[np.ndarray, ...]:
        if device not in self._got:
            if device not in self._held:
                raise KeyError(device)
            try:
                self._got[device] = tuple(self._fetch(self._held[device]))
            except lost_kinds() as e:  # the process died, and the arrays it kept
                raise outputs_lost(device, e) from e
        return self._got[device]

    def fetch(self) -> "HeldOutputs":
        """Every device's shards, one call per host process."""
        missing = [d for d in self._held if d not in self._got]
        if missing:
            try:
                flat = self._fetch([h for d in missing for h in self._held[d]])
            except lost_kinds():
                for d in missing:  # which device's: fetch one by one
                    self[d]
                raise
            i = 0
            for d in missing:
                n = len(self._held[d])
                self._got[d] = tuple(flat[i:i + n])
                i += n
        return self

    def handles(self) -> dict[int, list]:
        """device -> its outputs' ``Held`` handles, left where they are."""
        return dict(self._held)

    def __iter__(self):
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)
