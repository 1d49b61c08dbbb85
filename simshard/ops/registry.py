"""The op table: one entry per op, the only global registry simshard has.

An entry says everything the compiler needs about an op and nothing else knows about it:

* ``abstract_eval(*avals, **params) -> tuple[Aval, ...]``: result shapes and dtypes;
* ``kernel(*arrays, **params) -> tuple[ndarray, ...]``: the numpy computation;
* ``rule(in_avals, out_avals, **params) -> FactorRule``: how it may be sharded;
* ``local_params(params, in_shapes, out_shapes) -> params``: the params a device uses on its
  local shards (ops whose params name global sizes, e.g. reshape's new shape, override it);
* ``windows(in_avals, out_avals, **params) -> tuple[Window]`` and ``window_params(params,
  in_shapes, out_shapes, local) -> params`` (optional, together): the sliding windows of a
  convolution, pad or slice (``ops.windows``), so the partitioner can run it on row blocks after a
  halo exchange;
* ``vjp(ct, *operands, out, **params) -> tuple``: the derivative rule, one entry per operand:
  ``None`` (no cotangent: an index, a predicate, a piecewise-constant op) or a function of no
  arguments that returns the operand's cotangent, written with numpy calls on traced values so
  it records ops of this table (``simshard.transforms``: grad, vjp, jvp read only this);
* ``batch(operands, batched, **params) -> tuple``: the batching rule (``vmap``): the op on operands
  that carry a leading batch dim where ``batched`` says so, giving results batched at dim 0.

Propagation, explicit mode and partitioning read only these. ``register_op`` adds an op;
``register_rule`` adds a further sharding rule and ``define_vjp`` the derivative rule of an
existing op. They validate what they get.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..ir import trace_stack
from ..ir.program import Aval
from .factors import FactorRule, RuleError


def _same_params(params: dict, in_shapes, out_shapes) -> dict:
    return params


def local_result_shape(param: str) -> Callable[[dict, Any, Any], dict]:
    """``local_params`` for an op whose ``param`` names its (global) result shape: on a device
    it becomes the local result shape (reshape's new_shape, broadcast_in_dim's shape, ...)."""

    def localise(params: dict, in_shapes, out_shapes) -> dict:
        return {**params, param: tuple(out_shapes[0])}

    return localise


@dataclass(frozen=True)
class OpDef:
    name: str
    abstract_eval: Callable[..., tuple[Aval, ...]]
    kernel: Callable[..., tuple[np.ndarray, ...]]
    rule: Callable[..., FactorRule]
    local_params: Callable[[dict, Any, Any], dict] = _same_params
    extra_rules: tuple[Callable[..., FactorRule], ...] = ()
    doc: str = ""
    # Collectives of manual regions (and the region op itself): their kernels need the whole
    # device group, so they run only in simshard.manual.run_region, never one device at a time.
    region_only: bool = False
    # The kernel's float sums follow the operands' shapes (a BLAS blocks a contraction by them,
    # numpy's add.reduce sums pairwise or in sequence by the memory layout of the block):
    # run on a device's block it may give other bits than run whole, even where no sum is split.
    shape_dependent_sums: bool = False
    # The derivative rule (module doc); None: reverse mode refuses the op, naming it.
    vjp: Callable[..., tuple] | None = None
    # The batching rule (module doc); None: vmap refuses the op on a batched operand, naming it.
    batch: Callable[..., tuple] | None = None
    # An op with a program parameter (scan, while, switch): the partitioner partitions its body
    # (simshard.partition.loops) and never runs its kernel on blocks; its factor rule guides
    # propagation only, so the rules-by-execution check skips it (sharded runs check it instead).
    structured: bool = False
    # Sliding windows (``ops.windows``): ``windows(in_avals, out_avals, **params) -> tuple[Window]``
    # says which operand rows each result row reads, ``window_params(params, in_shapes,
    # out_shapes, local)`` the params on a block whose windowed dims hold only the rows it reads
    # (``local = {dim: LocalWindow}``: the block's edge padding and local stride).
    # With both, the partitioner may run the op on row blocks after a halo exchange.
    windows: Callable[..., tuple] | None = None
    window_params: Callable[..., dict] | None = None

    def rules(self, in_avals: Sequence[Aval], out_avals: Sequence[Aval], **params) -> list[FactorRule]:
        """The op's rule followed by any user-added ones, each checked against the shapes."""
        out = []
        for make in (self.rule,) + self.extra_rules:
            r = make(tuple(in_avals), tuple(out_avals), **params)
            try:
                r.check([a.shape for a in in_avals], [a.shape for a in out_avals])
            except RuleError as e:
                raise RuleError(f"op {self.name}: {e}") from None
            out.append(r)
        return out

    def factor_rule(self, in_avals: Sequence[Aval], out_avals: Sequence[Aval], **params) -> FactorRule:
        return self.rules(in_avals, out_avals, **params)[0]

    def __call__(self, *operands, **params):
        """Apply the op inside a traced function (``softplus = ss.register_op(...); softplus(x)``):
        the innermost trace in progress records it."""
        return trace_stack.innermost(f"op {self.name}").bind(self.name, *operands, **params)


OPS: dict[str, OpDef] = {}


def register_op(
    name: str,
    abstract_eval: Callable[..., tuple[Aval, ...]],
    kernel: Callable[..., tuple[np.ndarray, ...]],
    rule: Callable[..., FactorRule],
    *,
    local_params: Callable[[dict, Any, Any], dict] | None = None,
    doc: str = "",
    replace_existing: bool = False,
    region_only: bool = False,
    shape_dependent_sums: bool = False,
    vjp: Callable[..., tuple] | None = None,
    batch: Callable[..., tuple] | None = None,
    structured: bool = False,
    windows: Callable[..., tuple] | None = None,
    window_params: Callable[..., dict] | None = None,
) -> OpDef:
    """Add an op to the table. The name must be new unless ``replace_existing``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"op name {name!r} must be an identifier")
    if name in OPS and not replace_existing:
        raise ValueError(f"op {name!r} is already registered; pass replace_existing=True to replace it")
    for what, fn in (("abstract_eval", abstract_eval), ("kernel", kernel), ("rule", rule)):
        if not callable(fn):
            raise TypeError(f"op {name!r}: {what} must be callable, got {type(fn).__name__}")
    if vjp is not None and not callable(vjp):
        raise TypeError(f"op {name!r}: vjp must be callable, got {type(vjp).__name__}")
    op = OpDef(name, abstract_eval, kernel, rule, local_params or _same_params, (), doc, region_only,
               shape_dependent_sums, vjp, batch, structured, windows, window_params)
    if (windows is None) != (window_params is None):
        raise TypeError(f"op {name!r}: windows and window_params come together")
    OPS[name] = op
    return op


def _amend(op: str, what: str, fn, **fields) -> OpDef:
    """The entry of existing op ``op`` with ``fields`` replaced, ``fn`` checked to be callable."""
    if op not in OPS:
        raise KeyError(f"no op named {op!r}; known ops: {', '.join(sorted(OPS))}")
    if not callable(fn):
        raise TypeError(f"{what} for {op!r} must be callable")
    OPS[op] = replace(OPS[op], **fields)
    return OPS[op]


def register_rule(op: str, rule: Callable[..., FactorRule]) -> OpDef:
    """Add a further sharding rule to an existing op (a rule is an equality; more true ones are fine)."""
    return _amend(op, "rule", rule, extra_rules=(OPS[op].extra_rules if op in OPS else ()) + (rule,))


def define_vjp(op: str, vjp: Callable[..., tuple]) -> OpDef:
    """Give an existing op its derivative rule (module doc), replacing any it had."""
    return _amend(op, "vjp", vjp, vjp=vjp)


def define_batch(op: str, batch: Callable[..., tuple]) -> OpDef:
    """Give an existing op its batching rule (module doc), replacing any it had."""
    return _amend(op, "batching rule", batch, batch=batch)


def define_windows(op: str, windows: Callable[..., tuple], window_params: Callable[..., dict]) -> OpDef:
    """Give an existing op its sliding windows and their local params (the fields' comment)."""
    if not callable(window_params):
        raise TypeError(f"window_params for {op!r} must be callable")
    return _amend(op, "windows", windows, windows=windows, window_params=window_params)


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}; known ops: {', '.join(sorted(OPS))}") from None
