"""``PutOnce``: each distinct array put into Ray's object store once (the driver's input shards,
a device's message to several peers on the ray data plane)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .start import import_ray


class PutOnce:
    """``ray.put`` each distinct array once, by identity: a block several devices hold, an array
    sent to several peers. Each array is kept with its ref, so its id cannot be reused meanwhile."""

    def __init__(self):
        self._refs: dict[int, tuple[np.ndarray, Any]] = {}

    def __call__(self, array: np.ndarray):
        hit = self._refs.get(id(array))
        if hit is None:
            hit = self._refs[id(array)] = (array, import_ray().put(array))
        return hit[1]

    def __len__(self) -> int:
        return len(self._refs)
