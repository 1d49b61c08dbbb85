"""The estimate's caches, each named and keyed by value.

A mesh of thousands runs the same few local shapes and instructions over and over: the walk
looks each one up here rather than recomputing it. Every key is a value (a shape and dtype, an
op with its parameters and operand blocks, an instruction with its device's codes), so an entry
holds what it was made from alive and no later object can be mistaken for it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from ...spmd import Instr
from .blocks import Block


class ComputeResult(NamedTuple):
    """A compute instruction's result blocks on some operand blocks, and its work: (FLOPs,
    bytes read and written), the key ``report/compute.py`` counts runs under."""

    blocks: tuple[Block, ...]
    work: tuple  # report/compute.py's Work


class _Same:
    """A value that neither hashes nor breaks into parts that do, keyed by identity: the key
    holds it, so its identity cannot pass to another object while the cache lives."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.value is self.value


def value_key(value: Any) -> Any:
    """``value`` itself where it hashes, else a hashable stand-in equal for equal values: an
    array as its dtype, shape and bytes; lists, tuples, dicts and dataclasses part by part."""
    try:
        hash(value)
        return value
    except TypeError:
        return _frozen(value)


def _frozen(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(value_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, value_key(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), tuple(value_key(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return _Same(value)


class Memo:
    """The named caches of one estimate (``estimate_spmd`` makes one, the walk and its loops'
    walks share it), and the log of records the walk appends to."""

    __slots__ = ("blocks", "results", "copies", "routes", "group_costs", "group_tables", "records")

    def __init__(self) -> None:
        self.blocks: dict[tuple, Block] = {}  # (shape, dtype) -> its one Block
        self.results: dict[tuple, ComputeResult] = {}  # (op, params, operand blocks) -> its result
        self.copies: dict[tuple, Instr] = {}  # (instruction, its Varying fields' codes) -> the resolved copy
        self.routes: dict[tuple, Any] = {}  # a permute's pairs -> their ``Routes``
        self.group_costs: dict[tuple, Any] = {}  # (kind, group length, what its positions hold) -> ``GroupCosts``
        # id of a collective's groups (a Varying table, or one group) -> (it, its ``GroupTable``):
        # by identity, the entry holding the table (a table of 128 groups is hashed by no one)
        self.group_tables: dict[int, tuple] = {}
        # not a cache: the walk's log of communication records, class records and repeats in
        # the order the steps ran (one per estimate, the loops' walks append to it too)
        self.records: list = []

    def block(self, shape: tuple[int, ...], dtype: np.dtype) -> Block:
        """One Block per shape and dtype (a mesh of thousands slices the same shapes over and over)."""
        key = (shape, dtype)
        hit = self.blocks.get(key)
        if hit is None:
            hit = self.blocks[key] = Block(shape, dtype)
        return hit
