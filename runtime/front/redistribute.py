"""Moving a device array from one layout to another on its devices: the runtime half of
``DTensor.redistribute``.

The reshard planner (``plan_reshard``) chooses the collectives for any two layouts of the
placement model (nested uneven chunks and user placements included, through the exchange
path where no tensor-dimension sharding states them); its steps become a one-input, one-output
``SpmdProgram`` that the array's devices object (``LocalMesh`` / ``RayMesh``) loads once per
(source, target, shape, dtype) and runs on the shards where they are. What the run moved is a
``CommReport``, also handed to any active ``CommDebugMode``.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from simshard.partition.builder import ScheduleBuilder
from simshard.partition.emit import emit_plan
from simshard.partition.reshard import plan_reshard
from simshard.spmd import SpmdProgram
from simshard.report.comm import CommReport

from ..calls import comm_debug

# devices object -> (source, target, shape, dtype) -> (load key, SpmdProgram)
_LOADED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def label(src, dst) -> str:
    """The instructions' source, as reports show it: ``redistribute [S(0), R] -> [R, R]``."""
    def pl(s):
        return "[" + ", ".join(map(str, getattr(s, "placements", ()))) + "]" if hasattr(s, "placements") else str(s)

    return f"redistribute {pl(src)} -> {pl(dst)}"


def reshard_program(src, dst, shape, dtype, devices) -> SpmdProgram:
    """The SpmdProgram moving a ``shape`` / ``dtype`` array laid out as ``src`` to ``dst``."""
    plan = plan_reshard(src, dst, shape, dtype)
    b = ScheduleBuilder(devices)
    inp = b.buf()
    out = emit_plan(plan, b, inp, source=label(src, dst))
    return SpmdProgram(None, b.finish([inp], [out]), (src,), (dst,))


def redistribute_shards(arr, dst) -> tuple[dict[int, Any], CommReport]:
    """Each device's shard of ``arr`` (a DeviceArray on ``arr.host``) laid out as ``dst``, and
    what moving them cost."""
    host = arr.host
    key = (arr.sharding, dst, tuple(arr.shape), np.dtype(arr.dtype).str)
    loaded = _LOADED.setdefault(host, {})
    if key not in loaded:
        spmd = reshard_program(arr.sharding, dst, arr.shape, arr.dtype, host.devices)
        loaded[key] = (host.load(spmd), spmd)
    load_key, spmd = loaded[key]
    execution = host.execute(load_key, spmd, {d: [arr.shards[d]] for d in spmd.devices})
    outputs = execution.outputs
    handles = outputs.handles() if hasattr(outputs, "handles") else outputs
    comm = execution.comm
    comm_debug.observe(label(arr.sharding, dst), comm.records, {"shape": tuple(arr.shape), "from": arr.sharding,
                                                                 "to": dst})
    return {d: handles[d][0] for d in spmd.devices}, comm
