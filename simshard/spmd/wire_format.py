"""The msgpack wire format of schedules: plain data that round-trips exactly.

msgpack keeps lists, dicts, ints, floats, str and bytes; everything else is tagged so that it
comes back as the same type (tuples stay tuples, numpy scalars stay numpy scalars, a loop's body
its instructions).
"""

from __future__ import annotations

from dataclasses import fields

import msgpack
import numpy as np

from ..sharding.dims import Sharding
from ..sharding.mesh import Mesh
from .instructions import INSTRUCTIONS, Instr
from .resolve import Instructions


def packed(data) -> bytes:
    """``data`` (plain data and the types ``encode`` tags) as msgpack bytes."""
    return msgpack.packb(encode(data), use_bin_type=True)


def unpacked(data: bytes):
    """What ``packed`` made ``data`` of."""
    return decode(msgpack.unpackb(data, raw=False, strict_map_key=False))


def encode(v):
    """``v`` as msgpack-able plain data, every non-msgpack type tagged."""
    if isinstance(v, (tuple, Instructions)):
        return {"__tuple__": [encode(x) for x in v]}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, dict):
        return {k: encode(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return {"__ndarray__": v.tobytes(), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, np.generic):
        return {"__scalar__": np.asarray(v).tobytes(), "dtype": v.dtype.str}
    if isinstance(v, np.dtype):
        return {"__dtype__": v.str}
    if isinstance(v, range):
        return {"__range__": [v.start, v.stop, v.step]}
    if isinstance(v, Sharding):
        return {"__sharding__": str(v), "mesh": str(v.mesh)}
    if isinstance(v, Instr):  # a loop's body
        return {"__instr__": v.kind, "fields": {f.name: encode(getattr(v, f.name)) for f in fields(v)}}
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    raise TypeError(f"a schedule holds plain data only; cannot serialize {type(v).__name__}")


def decode(v):
    """The value ``encode`` made ``v`` of."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, dict):
        if "__tuple__" in v:
            return tuple(decode(x) for x in v["__tuple__"])
        if "__ndarray__" in v:
            return np.frombuffer(v["__ndarray__"], dtype=np.dtype(v["dtype"])).reshape(v["shape"]).copy()
        if "__scalar__" in v:
            return np.frombuffer(v["__scalar__"], dtype=np.dtype(v["dtype"]))[0]
        if "__dtype__" in v:
            return np.dtype(v["__dtype__"])
        if "__range__" in v:
            return range(*v["__range__"])
        if "__instr__" in v:
            return INSTRUCTIONS[v["__instr__"]](**{k: decode(x) for k, x in v["fields"].items()})
        if "__sharding__" in v:
            mesh = Mesh.parse(v["mesh"])
            return Sharding.parse(v["__sharding__"], mesh)
        return {k: decode(x) for k, x in v.items()}
    return v
