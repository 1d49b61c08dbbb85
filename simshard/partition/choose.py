"""Choosing how an op runs: candidate assignments of mesh axes to its rule's factors, priced.

Candidates come from the operands' current shardings and the results' wanted shardings
(``assign.candidates``), for every rule of the op, with and without a delayed reduction of pending
operands (``linear.pending_ok``) and with each way to split its sliding windows over row blocks
(``halo``). Each is priced in bytes: the reshards its operands need plus settling its results
where they are wanted (``copies.ValueCopies.settle_cost``). The cheapest wins (ties: smaller
local results, then the earlier candidate); identical ops (a model's repeated blocks) share one
pricing (``signature``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..ir.program import Eqn, Value
from ..ops import get_op
from ..ops.check import project
from ..ops.factors import REDUCTION, FactorRule
from ..sharding.dims import Sharding
from ..sharding.layout import Layout
from ..sharding.mesh import Mesh
from .assign import candidates, operand_split, split_degree
from .halo import Halo, apply_halo, halo_choices
from .linear import pending_ok
from .reshard import translate
from .reshard.identity_cache import ByIdentity
from .reshard.plan import largest_block, layout_of
from .copies import literal_key, literal_params, with_pending


@dataclass(frozen=True)
class Candidate:
    """One way to run an op, priced: ``cost`` (bytes moved, the largest result block, the
    operands' largest blocks: compared in that order), the ``rule`` and its ``assignment``
    (factor -> mesh axes), the operands' and results' shardings, and the row blocks ``halo``
    splits its windows into (None when it runs on whole windows)."""

    cost: tuple
    rule: FactorRule | None
    assignment: dict
    in_shardings: tuple
    out_shardings: tuple
    halo: Halo | None


class Delayed(NamedTuple):
    """A delayed reduction to price: which operands stay pending (``operands``, per operand),
    under ``reduce_op`` over mesh ``axes``."""

    operands: Any
    reduce_op: str
    axes: tuple


class OpShapes(NamedTuple):
    """What pricing reads of an op's operands and results: their global shapes, and which
    operands are values (not literals)."""

    ins: list
    outs: list
    is_value: list


class OpChoice:
    """Choosing how an op runs: a part of the partitioner (``partition._Partitioner``), on its
    ``copies``, ``memo`` and value methods (``ValueCopies``); ``emit_op`` runs the choice."""

    def signature(self, e: Eqn):
        """What the choice for ``e`` depends on: op, params, avals, every copy of each operand,
        where the results should go. Identical blocks of a model share one pricing."""
        params = []
        for k, v in e.params:
            try:
                hash(v)
                params.append((k, v))
            except TypeError:
                params.append((k, ByIdentity(v)))
        ins = tuple(
            (i.aval, tuple(_spec_key(c.spec) for c in self.copies[i])) if isinstance(i, Value)
            else ("lit", i.aval, literal_key(i.value))
            for i in e.inputs
        )
        return (e.op, tuple(params), ins, tuple((o.aval, self.want(o)) for o in e.outputs))

    def generic(self, e: Eqn) -> None:
        """Partition an op of the registry: run it where its operands lie when it is functorial
        there, else at its cheapest candidate (remembered by ``signature``)."""
        if self.functorial(e):
            return
        try:
            key = self.signature(e)
        except TypeError:
            key = None
        if key is not None and key in self.memo:
            best = self.memo[key]
            self.emit_op(e, best)
            return
        mesh = self.target(e.outputs[0]).mesh
        best = self.choose(e, mesh)
        if key is not None:
            self.memo[key] = best
        self.emit_op(e, best)

    def choose(self, e: Eqn, mesh: Mesh) -> Candidate:
        """The cheapest candidate for ``e`` (everything replicated when no rule applies)."""
        op = get_op(e.op)
        in_avals = [i.aval for i in e.inputs]
        out_avals = [o.aval for o in e.outputs]
        shapes = OpShapes([a.shape for a in in_avals], [a.shape for a in out_avals],
                          [isinstance(i, Value) for i in e.inputs])
        try:
            rules = op.rules(in_avals, out_avals, **e.kw)
        except Exception:
            rules = []
        current = [self.primary(i) if isinstance(i, Value) else None for i in e.inputs]
        variants = [None] + self.delayed_variants(e, current, mesh)
        best = None
        windows = _windows(op, in_avals, out_avals, e.kw)
        for rule in rules:
            weights = [_nbytes(a) for a in in_avals] + [_nbytes(a) for a in out_avals]
            op_specs = [self.on_mesh(c, mesh) for c in current]
            res_specs = [self.on_mesh(self.want(o), mesh) for o in e.outputs]
            halos = halo_choices(windows, op_specs, res_specs) if windows else []
            bound = operand_split(rule, e.op, shapes.ins, shapes.outs, mesh, op_specs) if rule.of_kind(REDUCTION) else None
            for delayed in variants:
                reserved = delayed.axes if delayed else ()
                for assignment in candidates(rule, e.op, shapes.ins, shapes.outs, mesh, op_specs, res_specs, weights,
                                             reserved):
                    for choice in [None] + halos:
                        cand = self.price(e, rule, assignment, delayed, mesh, shapes,
                                          (windows, choice, reserved) if choice else None, bound)
                        if cand is not None and (best is None or cand.cost < best.cost):
                            best = cand
        if best is None:  # no usable rule: everything replicated
            in_sh = tuple(Sharding.replicated_on(mesh, len(s)) for s in shapes.ins)
            out_sh = tuple(Sharding.replicated_on(mesh, len(s)) for s in shapes.outs)
            best = Candidate((0,), None, {}, in_sh, out_sh, None)
        return best

    def delayed_variants(self, e: Eqn, current: list, mesh: Mesh) -> list[Delayed]:
        """The delayed reduction to price besides reducing first, when ``e``'s pending operands
        (one reduction over one set of axes, on ``mesh``) may stay pending (``pending_ok``)."""
        pend = [bool(c is not None and c.unreduced) for c in current]
        if not any(pend):
            return []
        ops = {c.reduce_op for c, p in zip(current, pend) if p}
        axes = {frozenset(c.unreduced) for c, p in zip(current, pend) if p}
        meshes = {c.mesh for c, p in zip(current, pend) if p}
        if len(ops) != 1 or len(axes) != 1 or meshes != {mesh}:
            return []
        kinds = ["pending" if p else ("value" if isinstance(i, Value) else "literal") for i, p in zip(e.inputs, pend)]
        which = pending_ok(e.op, {**e.kw, **literal_params(e)}, kinds, next(iter(ops)))
        if which is None:
            return []
        # after "reduce first": a delayed reduction must be strictly cheaper
        return [Delayed(which, next(iter(ops)), tuple(next(iter(axes))))]

    def on_mesh(self, spec: Sharding | None, mesh: Mesh) -> Sharding | None:
        """``spec``'s dims written on ``mesh`` (None where they do not translate)."""
        if spec is None:
            return None
        s = Sharding(spec.mesh, spec.dims)  # without pending axes: projection looks at dims only
        if s.mesh == mesh:
            return s
        return translate(s, mesh)

    def price(self, e, rule, assignment, delayed: Delayed | None, mesh, shapes: OpShapes,
              halo_choice=None, bound: int | None = None) -> Candidate | None:
        """``e`` run with ``assignment`` (and ``halo_choice``: windows split over axes, ``halo``),
        priced; None when it cannot run so. A contraction that splits its work fewer ways than ``bound``
        (the split its operands already carry) ranks after every one that keeps that split."""
        try:
            in_sh, out_sh = project(rule, shapes.ins, shapes.outs, mesh, assignment)
        except ValueError:
            return None
        in_sh, out_sh = list(in_sh), list(out_sh)
        if delayed:
            if out_sh[0].unreduced and rule.reduce_op != delayed.reduce_op:
                return None
            for t, i in enumerate(e.inputs):
                if shapes.is_value[t] and delayed.operands[t]:
                    in_sh[t] = with_pending(in_sh[t], delayed.axes, delayed.reduce_op)
            out_sh = [with_pending(s, delayed.axes, delayed.reduce_op, keep=True) for s in out_sh]
        halo = None
        if halo_choice is not None:
            windows, choice, reserved = halo_choice
            got = apply_halo(windows, choice, in_sh, out_sh, shapes.ins, shapes.outs, reserved)
            if got is None:
                return None
            in_sh, out_sh, halo = list(got[0]), list(got[1]), got[2]
        cost = 0
        for t, i in enumerate(e.inputs):
            if shapes.is_value[t]:
                cost += self.cost(i, in_sh[t])
        res_elems = 0
        for o, s in zip(e.outputs, out_sh):
            cost += self.settle_cost(o, s)
            res_elems += largest_block(layout_of(s, o.aval.shape))
        in_elems = sum(largest_block(layout_of(s, sh)) for s, sh, v in zip(in_sh, shapes.ins, shapes.is_value) if v)
        redundant = bound is not None and split_degree(rule, mesh, assignment) < bound
        return Candidate((redundant, cost, res_elems, in_elems), rule, assignment, tuple(in_sh), tuple(out_sh), halo)


def _windows(op, in_avals, out_avals, kw) -> tuple:
    """The op's sliding windows (``ops.windows``), or () when it has none (or none for these shapes)."""
    if op.windows is None:
        return ()
    try:
        return tuple(op.windows(in_avals, out_avals, **kw))
    except Exception:  # params the op's own checks refuse: no halo path
        return ()


def _spec_key(spec):
    """A copy's spec as a memo key: a Layout (unhashable: it compares by content, which would read
    every device's index arrays) by identity, the key holding it so that its id names no other
    layout while the memo (one partitioner's run) lives."""
    return ByIdentity(spec) if isinstance(spec, Layout) else spec


def _nbytes(a) -> int:
    return int(np.prod(a.shape, dtype=np.int64)) * a.dtype.itemsize
