"""User-registered ops and reduce ops a program names, shipped to device processes with it.

Schedules name ops and reduce ops by string (they are plain data). A device process imports
simshard and so knows the built-in entries, but not the ones a user registered in the driver
(``register_op``, ``register_reduce_op`` / ``Partial(reduce_op=ReduceOp(...))``): ``user_entries``
pickles those the program uses, their functions by value (a device process cannot import the
user's script or test module), and ``install`` registers them on the device's side before its
schedule runs.
"""

from __future__ import annotations

import sys
from typing import Iterable

import cloudpickle

from simshard.ops.registry import OPS
from simshard.sharding.reduce_ops import BUILT_IN, REDUCE_OPS


def user_entries(spmd) -> bytes | None:
    """The user entries ``spmd`` names, pickled; None when it names only built-in ones. Every
    device runs the same instruction sequence, so one schedule names them all."""
    if not spmd.schedules:
        return None
    ops, reduce_ops = set(), set()
    for ins in _instructions(spmd.schedules[0].instrs):
        if ins.kind == "compute":
            ops.add(ins.op)
        if getattr(ins, "reduce_op", None):
            reduce_ops.add(ins.reduce_op)
    user_ops = {n: OPS[n] for n in sorted(ops) if n in OPS and not _module_of(OPS[n].kernel).startswith("simshard")}
    user_reduce = {n: REDUCE_OPS[n] for n in sorted(reduce_ops) if n in REDUCE_OPS and n not in BUILT_IN}
    if not user_ops and not user_reduce:
        return None
    modules = {_module_of(f) for e in list(user_ops.values()) + list(user_reduce.values()) for f in _functions(e)}
    by_value = [sys.modules[m] for m in modules if m in sys.modules and m != "__main__" and not m.startswith("simshard")
                and not m.startswith("numpy")]
    for m in by_value:
        cloudpickle.register_pickle_by_value(m)
    try:
        return cloudpickle.dumps((user_ops, user_reduce))
    finally:
        for m in by_value:
            cloudpickle.unregister_pickle_by_value(m)


def install(data: bytes | None) -> None:
    """Register the entries ``user_entries`` pickled (names already known are left as they are)."""
    if data is None:
        return
    user_ops, user_reduce = cloudpickle.loads(data)
    for name, op in user_ops.items():
        OPS.setdefault(name, op)
    for name, op in user_reduce.items():
        REDUCE_OPS.setdefault(name, op)


def _instructions(instrs) -> Iterable:
    for ins in instrs:
        yield ins
        for nested in (getattr(ins, "body", ()), getattr(ins, "cond", ())):
            yield from _instructions(nested)
        for branch in getattr(ins, "branches", ()):
            yield from _instructions(branch)


def _functions(entry):
    """The callables an entry carries (an OpDef's kernel and rules, a ReduceOp's combine)."""
    for name in ("kernel", "abstract_eval", "rule", "local_params", "combine", "identity_value"):
        f = getattr(entry, name, None)
        if callable(f):
            yield f


def _module_of(f) -> str:
    return getattr(f, "__module__", None) or getattr(type(f), "__module__", "") or ""
