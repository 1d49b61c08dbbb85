"""A run's outputs against the framework's own (``ss.from_jax``, ``ss.from_torch``): JAX or
PyTorch run on the same inputs on CPU, each output compared with what the devices computed.

Bitwise where the arithmetic is exact: every input integer-valued and every op one whose result
on integers is exact (adds, multiplies, contractions, comparisons, selects, data movement:
``EXACT_OPS``), so any order of additions gives the same bits while the values stay below
2^mantissa. Otherwise the framework's kernels (its own exp, tanh, fused multiply-adds, its
summation order) differ from numpy's, and the check allows the importer's ``tolerance_ulp``:
the largest difference counted in ULPs of the output's largest magnitude (so a value near zero
after cancellation is judged at the output's scale, where its error lives). The report says
which of the two each check used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .verify import Check, compare

EXACT_OPS = frozenset({
    "add", "sub", "mul", "neg", "abs", "max", "min", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor",
    "logical_not", "select", "rem", "floordiv", "convert", "sign", "floor", "ceil", "square", "dot_general", "reduce_sum",
    "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cumsum", "sort", "argsort", "reshape",
    "transpose", "broadcast_in_dim", "concatenate", "slice", "pad", "take", "iota", "full", "constant",
    "sharding_constraint", "reshard", "dynamic_slice", "dynamic_update_slice", "stop_gradient",
    "propagation_barrier", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "psum", "pmax", "pmin",
    "all_gather", "psum_scatter", "ppermute", "all_to_all", "axis_index", "shard_map", "scan", "while", "switch",
})


@dataclass(frozen=True)
class FrameworkCheck:
    """One output against the framework's: ``exact`` (bitwise required) or within ``tolerance_ulp``
    ULPs of the output's largest magnitude (``scaled_ulp``: the largest difference so counted)."""

    check: Check
    framework: str
    exact: bool
    tolerance_ulp: int
    scaled_ulp: float | None

    @property
    def ok(self) -> bool:
        if self.check.bitwise:
            return True
        return (not self.exact and self.check.problem == "values" and self.scaled_ulp is not None
                and self.scaled_ulp <= self.tolerance_ulp)

    @property
    def mode(self) -> str:
        return "bitwise required: exact arithmetic" if self.exact else f"within {self.tolerance_ulp} ULP of scale allowed"

    def describe(self) -> str:
        c = self.check
        verdict = "ok" if self.ok else "DIFFERS"
        if c.bitwise:
            return f"{c.what} vs {self.framework}: bitwise equal ({self.mode}): {verdict}"
        if c.problem != "values" or self.scaled_ulp is None:
            return f"{c.what} vs {self.framework}: {c.describe()} ({self.mode}): {verdict}"
        return (f"{c.what} vs {self.framework}: {c.mismatches} elements differ, at most {self.scaled_ulp:.1f} ULP of "
                f"the output's scale (first at {c.first_index}: {c.actual_value!r} vs {c.expected_value!r}; "
                f"{self.mode}): {verdict}")


def program_ops(program) -> set[str]:
    """Every op of ``program`` and of the programs inside its ops (loop and branch bodies, regions)."""
    ops: set[str] = set()
    for e in program.eqns:
        ops.add(e.op)
        for _, value in e.params:
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(inner, "eqns") and hasattr(inner, "outputs"):
                    ops |= program_ops(inner)
    return ops


def exact_arithmetic(program, leaves: Sequence) -> bool:
    """Integer-valued inputs and only ops exact on integers (the module docstring)."""
    for x in leaves:
        a = np.asarray(x)
        if a.dtype.kind in "fc" and not np.array_equal(a, np.round(a)):
            return False
    return program_ops(program) <= EXACT_OPS


def scaled_ulp(actual, expected) -> float | None:
    """The largest |actual - expected| in ULPs of the largest |expected| (floats; else None)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype.kind != "f" or a.shape != e.shape or a.dtype != e.dtype:
        return None
    if not (np.isfinite(a).all() and np.isfinite(e).all()):
        return None
    scale = np.spacing(np.asarray(np.abs(e).max() if e.size else 0, dtype=e.dtype)).astype(np.float64)
    return float((np.abs(a.astype(np.float64) - e.astype(np.float64)) / scale).max()) if e.size else 0.0


def against_framework(f, args: Sequence, program, leaves: Sequence, outputs: Sequence) -> tuple[FrameworkCheck, ...]:
    """The checks of ``outputs`` against the framework's own, where ``f`` came from one
    (``f.framework_reference``); () for every other function."""
    reference = getattr(f, "framework_reference", None)
    ref = reference(*args) if reference is not None else None
    if ref is None:
        return ()
    if len(ref.outputs) != len(outputs):
        raise ValueError(f"{ref.framework} gave {len(ref.outputs)} outputs where the run has {len(outputs)}")
    exact = exact_arithmetic(program, leaves)
    return tuple(
        FrameworkCheck(compare(a, e, f"output {i}"), ref.framework, exact, 0 if exact else ref.tolerance_ulp,
                       scaled_ulp(a, e))
        for i, (a, e) in enumerate(zip(outputs, ref.outputs)))
