"""Evaluate a Program on whole arrays with the registry's kernels (the single-device reference,
and the kernel of ops whose parameter is a program: a scan's body)."""

from __future__ import annotations

import numpy as np

from ..ir.program import Literal, Program
from .registry import get_op
from .threads import one_blas_thread


def evaluate(program: Program, *args) -> tuple[np.ndarray, ...]:
    """Run every equation in order on global arrays; returns the outputs."""
    if len(args) != len(program.inputs):
        raise TypeError(f"program takes {len(program.inputs)} inputs, got {len(args)}")
    env = {}
    for v, a in zip(program.inputs, args):
        a = np.asarray(a)
        if a.shape != v.aval.shape:
            raise ValueError(f"input {program.label(v) or v}: expected shape {v.aval.shape}, got {a.shape}")
        env[v] = a
    with one_blas_thread():  # the bits the devices get (simshard.ops.threads)
        for e in program.eqns:
            ins = [i.value if isinstance(i, Literal) else env[i] for i in e.inputs]
            outs = get_op(e.op).kernel(*ins, **e.kw)
            for v, o in zip(e.outputs, outs):
                env[v] = o
    return tuple(env[v] for v in program.outputs)
