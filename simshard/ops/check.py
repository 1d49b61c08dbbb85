"""Check a factor rule by running it: sharded execution, assembled, must equal the whole op bit for bit.

A rule is a claim: if every tensor is sharded the way the rule projects one assignment of mesh
axes to factors, then running the op's kernel on each device's local blocks and assembling the
results gives exactly the op's result on the whole arrays. ``check_rule`` tests that claim for one
op, one set of inputs and one assignment:

1. build the op's rule for the inputs' avals (``rule_index`` picks a user-added rule);
2. project ``assignment`` ({factor: mesh axes}) onto every operand and result dim (a dim's axes
   are its factors' axes, major to minor); results also get the reduction factors' axes as
   ``unreduced`` with the rule's ``reduce_op``;
3. shard every operand with its layout, pad local blocks along dims that hold a sharded
   reduction factor up to the layout's block size with that reduction's identity (so empty or
   short blocks reduce correctly), and run the kernel per device with the op's ``local_params``
   (nullary kernels also get ``out_index``: the device's global indices);
4. assemble every result with its layout (pending reductions combine in canonical order) and
   compare with the kernel on the whole arrays.

Which assignments are allowed (``project`` raises ValueError otherwise):

* only pass-through and reduction factors may carry axes; need-replication and permutation
  factors stay whole, and so do ``inexact`` factors (and any factor of a dim whose factor sizes
  do not multiply to the dim size): they describe the op for propagation only;
* no mesh axis (or overlapping sub-axis) is used twice;
* in a compound dim a factor may be sharded only when every factor major to it is fully
  sharded (axis product == size), and a non-minor factor's axis product must divide its size;
* an uneven sharding (axis product not dividing the size) is allowed only for a factor that is
  alone in every dim it appears in.

Anything else the checker simply runs as a claim, and reports when it fails: a pass-through
factor present only in operands, say (a reduction mislabelled as pass-through), fails as soon as
it is sharded. ``shardable_factors`` lists the factors a correct rule can have sharded and pass.

Bitwise means bitwise, signed zeros included: a padded block contributes the reduce op's
identity (``REDUCE_OPS[op].identity``), and whether an all-(-0.0) sum survives depends on that
identity's sign; exact-arithmetic test inputs avoid zeros so no check hinges on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..sharding.axes import AxisRef, check_coexist, merge_adjacent
from ..errors import ReplicaMismatchError, ShardingError
from ..dtypes import bit_equal
from ..sharding.layout import layout
from ..sharding.mesh import Mesh
from ..ir.program import Aval
from ..sharding.reduce_ops import REDUCE_OPS
from ..sharding.dims import Sharding
from .factors import NEED_REPLICATION, PASS_THROUGH, PERMUTATION, REDUCTION, FactorRule
from .registry import get_op

Assignment = Mapping[str, Sequence["str | AxisRef"]]


@dataclass(frozen=True)
class CheckReport:
    """What one passing check ran: the rule, the assignment and the shardings it projected to."""

    op: str
    rule_index: int
    rule: FactorRule
    assignment: dict[str, tuple[AxisRef, ...]]
    in_shardings: tuple[Sharding, ...]
    out_shardings: tuple[Sharding, ...]
    devices: int

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.in_shardings)) or "-"
        outs = ", ".join(map(str, self.out_shardings))
        return (
            f"{self.op} rule #{self.rule_index} {self.rule} with {_fmt_assignment(self.assignment)}: "
            f"operands {ins} -> results {outs}: bitwise equal on {self.devices} devices"
        )


def _fmt_assignment(assignment: Mapping[str, Sequence[AxisRef]]) -> str:
    items = [f"{f}:({','.join(a.short() for a in axes)})" for f, axes in sorted(assignment.items()) if axes]
    return "{" + ", ".join(items) + "}"


def _refs(axes) -> tuple[AxisRef, ...]:
    if isinstance(axes, (str, AxisRef)):
        axes = (axes,)
    return tuple(a if isinstance(a, AxisRef) else AxisRef(str(a)) for a in axes)


def inexact_factors(rule: FactorRule, operand_shapes, result_shapes) -> frozenset[str]:
    """Factors that never carry axes when the op runs: marked inexact, or in a dim whose factor
    sizes do not multiply to its size."""
    sizes = rule.sizes
    out = set(rule.inexact)
    for dims_list, shapes in ((rule.operands, operand_shapes), (rule.results, result_shapes)):
        for dims, shape in zip(dims_list, shapes):
            for fs, n in zip(dims, shape):
                if math.prod(sizes[f] for f in fs) != n:
                    out.update(fs)
    return frozenset(out)


def shardable_factors(rule: FactorRule, operand_shapes, result_shapes, *, result_only: bool = False) -> tuple[str, ...]:
    """Factors a sharded run can split: exact reduction factors, and exact pass-through factors
    present in an operand and a result.

    A pass-through factor found only in operands (broadcast_in_dim's expanded size-1 dim,
    reshape's unshared factors) makes no claim about running sharded: the result holds none of
    it, so a partitioner gathers it first. One found only in results can be split only by ops
    that build their block from params (``local_params`` or ``out_index``: broadcast_in_dim and
    the nullary ops); ``result_only=True`` adds those."""
    skip = inexact_factors(rule, operand_shapes, result_shapes)
    in_ops = {f for dims in rule.operands for fs in dims for f in fs}
    in_res = {f for dims in rule.results for fs in dims for f in fs}
    out = []
    for f, _ in rule.factors:
        if f in skip:
            continue
        kind = rule.kind(f)
        if kind == REDUCTION or (kind == PASS_THROUGH and f in in_res and (f in in_ops or result_only)):
            out.append(f)
    return tuple(out)


def project(
    rule: FactorRule,
    operand_shapes: Sequence[Sequence[int]],
    result_shapes: Sequence[Sequence[int]],
    mesh: Mesh,
    assignment: Assignment,
) -> tuple[tuple[Sharding, ...], tuple[Sharding, ...]]:
    """The operand and result shardings an assignment of axes to factors projects to; ValueError
    (naming the factor) when the assignment is not a sharding the op can run with."""
    sizes = rule.sizes
    axes = {f: _refs(a) for f, a in assignment.items()}
    for f in axes:
        if f not in sizes:
            raise ValueError(f"rule {rule}: no factor named {f!r} (factors: {', '.join(sizes)})")
    axes = {f: axes.get(f, ()) for f in sizes}
    _check_no_axis_twice(rule, axes, mesh)
    _check_factor_kinds(rule, axes, inexact_factors(rule, operand_shapes, result_shapes))
    _check_compound_dims(rule, axes, mesh)
    unreduced = tuple(a for f in rule.of_kind(REDUCTION) for a in axes[f])

    def sharding(dims, result: bool) -> Sharding:
        # a dim of several factors may hold consecutive sub-axes of one axis (a reshape splitting
        # a dim sharded over "x" into "x":(1)2 and "x":(2)2): on the merged dim they are "x"
        spec = tuple(merge_adjacent((a for f in fs for a in axes[f]), mesh.shape) for fs in dims)
        if result:
            return Sharding(mesh, spec, unreduced=unreduced, reduce_op=rule.reduce_op)
        return Sharding(mesh, spec)

    return (
        tuple(sharding(d, False) for d in rule.operands),
        tuple(sharding(d, True) for d in rule.results),
    )


def _check_no_axis_twice(rule: FactorRule, axes: Mapping[str, tuple[AxisRef, ...]], mesh: Mesh) -> None:
    """No mesh axis (or overlapping sub-axis) carries two factors."""
    used: list[tuple[AxisRef, str]] = []
    for f, refs in axes.items():
        for r in refs:
            for other, g in used:
                if other.name == r.name and (other == r or check_coexist(other, r, mesh.shape[r.name])):
                    raise ValueError(f"rule {rule}: axis {r.short()} is used twice (factors {g} and {f})")
            used.append((r, f))


def _check_factor_kinds(rule: FactorRule, axes: Mapping[str, tuple[AxisRef, ...]], inexact: frozenset[str]) -> None:
    """Need-replication, permutation and inexact factors stay whole."""
    for f, refs in axes.items():
        if not refs:
            continue
        kind = rule.kind(f)
        if kind in (NEED_REPLICATION, PERMUTATION):
            raise ValueError(f"rule {rule}: factor {f} is {kind} and must stay unsharded, got axes {_fmt_assignment({f: refs})}")
        if f in inexact:
            raise ValueError(
                f"rule {rule}: factor {f} is inexact (its dims' factor sizes do not multiply to the dim size); "
                "it only steers propagation and cannot be sharded"
            )


def _check_compound_dims(rule: FactorRule, axes: Mapping[str, tuple[AxisRef, ...]], mesh: Mesh) -> None:
    """In a dim of several factors: major factors fully sharded first, non-minor ones divided
    exactly; an uneven factor only when alone in its dims."""
    sizes = rule.sizes
    n = {f: math.prod(mesh.axis_size(a) for a in axes[f]) for f in sizes}
    for dims in rule.tensors:
        for fs in dims:
            for k, f in enumerate(fs):
                if not axes[f]:
                    continue
                for g in fs[:k]:
                    if n[g] != sizes[g]:
                        raise ValueError(
                            f"rule {rule}: factor {f} is sharded but the factor {g} major to it in the dim ({''.join(fs)}) "
                            f"is not fully sharded ({n[g]} of {sizes[g]}); that would need a strided view"
                        )
                if k < len(fs) - 1 and sizes[f] % n[f]:
                    raise ValueError(
                        f"rule {rule}: factor {f} of size {sizes[f]} is not minor-most in ({''.join(fs)}) "
                        f"and its axes (size {n[f]}) do not divide it"
                    )
                if sizes[f] % n[f] and len(fs) > 1:
                    raise ValueError(
                        f"rule {rule}: factor {f} of size {sizes[f]} is sharded unevenly ({n[f]} ways) but shares "
                        f"the dim ({''.join(fs)}) with other factors; uneven shardings need a factor alone in its dims"
                    )


def check_rule(
    op_name: str,
    arrays: Sequence[Any],
    params: Mapping[str, Any],
    mesh: Mesh,
    assignment: Assignment,
    rule_index: int = 0,
) -> CheckReport:
    """Run ``op_name`` sharded per ``assignment`` on ``mesh`` and compare with the whole op, bitwise.

    Returns a CheckReport; raises AssertionError naming op, rule, assignment and device when the
    sharded run differs or fails, ValueError when the assignment is not allowed (see module doc).
    """
    op = get_op(op_name)
    arrays = [np.asarray(a) for a in arrays]
    params = dict(params)
    in_avals = tuple(Aval(a.shape, a.dtype) for a in arrays)
    out_avals = tuple(op.abstract_eval(*in_avals, **params))
    rules = op.rules(in_avals, out_avals, **params)
    if not 0 <= rule_index < len(rules):
        raise ValueError(f"op {op_name} has {len(rules)} rule(s); rule_index {rule_index} is out of range")
    rule = rules[rule_index]
    in_shapes = [a.shape for a in in_avals]
    out_shapes = [a.shape for a in out_avals]
    in_sh, out_sh = project(rule, in_shapes, out_shapes, mesh, assignment)
    norm = {f: _refs(a) for f, a in assignment.items()}
    where = f"op {op_name} rule #{rule_index} {rule} with assignment {_fmt_assignment(norm)}"
    expected = _whole_run(op, arrays, params, out_avals, where)
    out_lays = [layout(s, shape) for s, shape in zip(out_sh, out_shapes)]
    sharded_reductions = {f for f in rule.of_kind(REDUCTION) if norm.get(f)}
    local_in = _local_inputs(rule, arrays, [layout(s, shape) for s, shape in zip(in_sh, in_shapes)], sharded_reductions)
    local_out: list[dict[int, np.ndarray]] = [{} for _ in out_lays]
    for dev in mesh.device_ids:
        outs = _device_run(op, params, dev, [shards[dev] for shards in local_in], out_lays, where)
        for k, o in enumerate(outs):
            local_out[k][dev] = o
    for k, (lay, shards, e) in enumerate(zip(out_lays, local_out, expected)):
        _compare_result(where, k, out_sh[k], lay, shards, np.asarray(e))
    return CheckReport(op_name, rule_index, rule, norm, in_sh, out_sh, mesh.size)


def _whole_run(op, arrays, params, out_avals, where: str) -> tuple:
    """The kernel on the whole arrays, checked against the op's abstract evaluation."""
    with np.errstate(all="ignore"):
        expected = tuple(op.kernel(*arrays, **params))
    if len(expected) != len(out_avals):
        raise AssertionError(f"{where}: kernel returned {len(expected)} results, abstract_eval says {len(out_avals)}")
    for k, (e, a) in enumerate(zip(expected, out_avals)):
        if tuple(np.shape(e)) != a.shape or np.asarray(e).dtype != a.dtype:
            raise AssertionError(f"{where}: whole-array kernel result {k} is {np.asarray(e).dtype}{list(np.shape(e))}, abstract_eval says {a}")
    return expected


def _local_inputs(rule: FactorRule, arrays, in_lays, sharded_reductions: set[str]) -> list[dict[int, np.ndarray]]:
    """Every operand's local blocks; along dims holding a sharded reduction factor, padded to the
    layout's block size with the reduction's identity (so short or empty blocks reduce right)."""
    identity_op = REDUCE_OPS[rule.reduce_op]
    local_in: list[dict[int, np.ndarray]] = []
    for t, (arr, lay) in enumerate(zip(arrays, in_lays)):
        shards = lay.shard(arr)
        pad_dims = [d for d, fs in enumerate(rule.operands[t]) if set(fs) & sharded_reductions]
        if pad_dims:
            block = lay.block_shape
            fill = identity_op.identity(arr.dtype)
            for dev, s in shards.items():
                widths = [(0, block[d] - s.shape[d]) if d in pad_dims else (0, 0) for d in range(s.ndim)]
                if any(w for _, w in widths):
                    shards[dev] = np.pad(s, widths, mode="constant", constant_values=fill)
        local_in.append(shards)
    return local_in


def _device_run(op, params, dev: int, ins: list[np.ndarray], out_lays, where: str) -> list[np.ndarray]:
    """The kernel on one device's blocks with the op's local params; its results must have their
    layouts' local shapes and match abstract_eval on the local params (``ss.estimate`` walks
    schedules with it)."""
    want = [lay.local_shape(dev) for lay in out_lays]
    local_params = op.local_params(dict(params), [a.shape for a in ins], want)
    if not ins:
        local_params = {**local_params, "out_index": out_lays[0].indices(dev)}
    try:
        with np.errstate(all="ignore"):
            outs = tuple(op.kernel(*ins, **local_params))
    except Exception as e:  # the kernel refused its local blocks
        raise AssertionError(f"{where}: device {dev}: kernel failed on local shapes {[a.shape for a in ins]}: {e}") from e
    if len(outs) != len(out_lays):
        raise AssertionError(f"{where}: device {dev}: kernel returned {len(outs)} results, expected {len(out_lays)}")
    for k, (o, w) in enumerate(zip(outs, want)):
        if tuple(np.shape(o)) != tuple(w):
            raise AssertionError(f"{where}: device {dev}: result {k} has local shape {np.shape(o)}, its layout says {w}")
    try:
        local_avals = op.abstract_eval(*(Aval(a.shape, a.dtype) for a in ins), **local_params)
    except Exception as e:
        raise AssertionError(f"{where}: device {dev}: abstract_eval refuses the local params {local_params} on local shapes "
                             f"{[a.shape for a in ins]}: {e}") from e
    for k, (o, a) in enumerate(zip(outs, local_avals)):
        if tuple(np.shape(o)) != tuple(a.shape) or np.asarray(o).dtype != np.dtype(a.dtype):
            raise AssertionError(f"{where}: device {dev}: result {k} is {np.asarray(o).dtype}{list(np.shape(o))} "
                                 f"on the device, abstract_eval of its local params says {a}")
    return [np.asarray(o) for o in outs]


def _compare_result(where: str, k: int, sharding: Sharding, lay, shards, expected: np.ndarray) -> None:
    """Result ``k`` assembled from the devices must equal the whole op's, bit for bit."""
    try:
        got = lay.assemble(shards)
    except (ShardingError, ReplicaMismatchError) as err:
        raise AssertionError(f"{where}: result {k} ({sharding}) does not assemble: {err}") from err
    if got.dtype != expected.dtype:
        raise AssertionError(f"{where}: result {k} assembled as {got.dtype}, the whole op gives {expected.dtype}")
    same = bit_equal(expected, got)
    if not same.all():
        idx = tuple(int(i) for i in np.argwhere(~same)[0]) if expected.ndim else ()
        holders = [d for d in lay.devices if all(i in lay.indices(d)[j] for j, i in enumerate(idx))]
        raise AssertionError(
            f"{where}: result {k} ({sharding}) differs at global index {idx}: sharded run gives "
            f"{got[idx]!r}, the whole op {expected[idx]!r} (computed on device(s) {holders})"
        )
