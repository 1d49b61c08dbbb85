"""Instruction ids of nested blocks: how many ids a control instruction's runs use, and where.

A block (a loop's body, a branch, a while's condition and body) runs its instruction j under id
``first + j`` and the control instructions in it under the ids after those: each one's
``id_base`` is relative to its block's first id (given when the schedule is numbered,
``simshard.spmd.numbering``) until ``placed`` runs the block at its ``first`` id, making it
absolute. These functions read instructions by their ``kind`` only, so the instruction classes
can use them without a cycle.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

WHILE_IDS = 10**15  # ids a while loop may use (its iterations times its instructions)

CONTROL = frozenset({"loop", "switch", "while"})  # instructions that run blocks of their own


def ids_of(ins) -> int:
    """How many ids a control instruction's runs use (0 for any other instruction)."""
    if ins.kind == "loop":
        return ins.length * ins.stride
    if ins.kind == "switch":
        return sum(block_ids(b) for b in ins.branches)
    if ins.kind == "while":
        return WHILE_IDS
    return 0


def block_ids(block) -> int:
    """Ids one run of a block uses: one per instruction, then its control instructions' ranges."""
    return len(block) + sum(ids_of(b) for b in block if b.kind in CONTROL)


def blocks_of(ins) -> tuple:
    """The blocks a control instruction runs (a while's condition and body as one)."""
    if ins.kind == "loop":
        return (ins.body,)
    if ins.kind == "switch":
        return ins.branches
    if ins.kind == "while":
        return (ins.cond + ins.body,)
    return ()


class NestedPlace(NamedTuple):
    """Where a control instruction sits in its parent's blocks, and its id range's start."""

    block: int  # which of the parent's blocks (``blocks_of``)
    position: int  # its position in that block
    id_base: int  # its first id, relative to the block's first id


def nested_ids(ins) -> tuple[NestedPlace, ...]:
    """Where the control instructions in ``ins``'s blocks sit and their id ranges start."""
    out = []
    for k, block in enumerate(blocks_of(ins)):
        offset = len(block)
        for j, b in enumerate(block):
            if b.kind in CONTROL:
                out.append(NestedPlace(k, j, offset))
                offset += ids_of(b)
    return tuple(out)


def placed(block, first: int) -> tuple:
    """A block as it runs from id ``first``: collectives under their ids, control instructions
    with their ranges made absolute."""
    out = []
    for j, b in enumerate(block):
        if b.is_collective:
            b = replace(b, id=first + j)
        elif b.kind in CONTROL:
            b = replace(b, id_base=first + b.id_base)
        out.append(b)
    return tuple(out)


def collective_run_as(ins, run_id: int):
    """The collective that ran under id ``run_id`` within top-level instruction ``ins`` (itself, or
    one in its blocks as the iteration or branch that ``run_id`` names runs it): what a run's
    record of a collective resolves to, so that a device need only say which id it ran and where."""
    if ins.kind not in CONTROL:
        return ins
    rel = run_id - ins.id_base
    if ins.kind == "switch":
        for branch in ins.branches:
            n = block_ids(branch)
            if rel < n:
                return _in_block(branch, run_id - rel, run_id)
            rel -= n
        raise ValueError(f"id {run_id} is past switch {ins.id_base}'s branches")
    block = ins.body if ins.kind == "loop" else ins.cond + ins.body
    j = rel % (ins.stride if ins.kind == "loop" else block_ids(block))
    return _in_block(block, run_id - j, run_id)


def _in_block(block: tuple, first: int, run_id: int):
    """The instruction under ``run_id`` of ``block`` run from id ``first`` (as ``placed`` would
    place it, placing only that one, not the block): one of its own, or the collective inside
    the nested control instruction whose id range holds ``run_id``."""
    j = run_id - first
    if j < len(block):
        return replace(block[j], id=run_id)
    for b in block:
        if b.kind in CONTROL and first + b.id_base <= run_id < first + b.id_base + ids_of(b):
            return collective_run_as(replace(b, id_base=first + b.id_base), run_id)
    raise ValueError(f"no instruction of the block runs under id {run_id}")
