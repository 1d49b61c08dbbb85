"""``GlobalArray``: a numpy array that carries the sharding it is laid out with (what
``MeshShardingHelper.local_data_to_global_array`` returns, and what sjit reads when a rule says
None for an argument).
"""

from __future__ import annotations

import numpy as np

from ..sharding.dims import NamedSharding
from ..tracing.tracer import ShapeDtype


class GlobalArray(np.ndarray):
    """A numpy array that says how it is laid out over the mesh (``local_data_to_global_array``).

    simshard runs in one process, so the "global" array simply is the whole array; ``sharding``
    (a NamedSharding) is what sjit uses as its input sharding when ``in_shardings`` says None
    for it, as JAX does for committed arrays. Arrays derived from it (slices, arithmetic) are
    plain again: their sharding is not known.
    """

    sharding: NamedSharding | None

    def __new__(cls, array, sharding: NamedSharding | None):
        self = np.asarray(array).view(cls)
        self.sharding = sharding
        return self

    def __array_finalize__(self, obj):
        self.sharding = None

    def __reduce__(self):
        return (GlobalArray, (np.asarray(self), self.sharding))

    def __repr__(self) -> str:
        return f"GlobalArray({np.asarray(self)!r}, sharding={self.sharding!r})"


def own_sharding(leaf):
    """The sharding a leaf carries itself (a ShapeDtype's or GlobalArray's), used when the rule says None."""

    if isinstance(leaf, (ShapeDtype, GlobalArray)):
        return leaf.sharding
    return None
