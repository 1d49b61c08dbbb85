"""What both importers share: the error an unmapped or mistranslated op raises, naming the op and
the user's source line, and the check that each translated op gives the framework's type."""

from __future__ import annotations

import importlib
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import TraceError


def require(module: str, api: str):
    """The optional framework ``module`` (``"jax"``, ``"torch"``), imported; where it is missing, an
    ImportError saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ImportError(f"{api} needs {module}, an optional dependency: pip install 'simshard[{module}]'") from e


class UnsupportedOpError(TraceError):
    """A framework op with no simshard op of the same meaning (or used in a way simshard cannot
    express); the message names the op, why, and the line of the user's code that made it."""


class FrameworkType(NamedTuple):
    """A result's shape and dtype as the framework states them."""

    shape: tuple[int, ...]
    dtype: np.dtype


def where_text(where: str) -> str:
    return f" (at {where})" if where else ""


def unsupported(framework: str, op: str, why: str, where: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{framework} op {op!r}: {why}{where_text(where)}")


def check_results(framework: str, op: str, values: Sequence, expected: Sequence[FrameworkType], where: str) -> None:
    """Each translated result has the framework's shape and dtype; else the import is wrong, said so."""
    if len(values) != len(expected):
        raise UnsupportedOpError(f"{framework} op {op!r} gave {len(values)} results where the framework has "
                                 f"{len(expected)}{where_text(where)}")
    for i, (v, t) in enumerate(zip(values, expected)):
        shape, dtype = tuple(np.shape(v)), np.dtype(getattr(v, "dtype", None) or np.asarray(v).dtype)
        if shape != tuple(t.shape) or dtype != np.dtype(t.dtype):
            raise UnsupportedOpError(
                f"{framework} op {op!r}: result {i} translated as {dtype}{list(shape)} where the framework has "
                f"{np.dtype(t.dtype)}{list(t.shape)}{where_text(where)}")


class FrameworkOutputs(NamedTuple):
    """The framework's own outputs for the same inputs (``report.framework`` compares a run's with
    them): ``framework`` names it and its version, ``tolerance_ulp`` the largest difference allowed
    where the arithmetic is not exact (in ULPs of each output's largest magnitude)."""

    framework: str
    outputs: tuple[np.ndarray, ...]
    tolerance_ulp: int
