"""Fuzzing across the pipeline, at a size CI affords: whatever a user types or writes, simshard
either answers (bit for bit) or raises one of its own errors, naming the problem.

* text: PartitionSpec spellings, placement lists and Shardy shardings, from arbitrary text and
  from valid text with random edits (tests/sharding/test_syntax_fuzz.py goes deeper on Shardy's);
* programs: random chains of element-wise ops, matmul / einsum, reductions, reshape, transpose and
  broadcasting, on meshes with size-1 and uneven (3) axes, with random P shardings on inputs and
  outputs, run on the local backend and verified against numpy with exact inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.tracing.explicit.errors import ShardingTypeError

OWN_ERRORS = (ss.ShardingError, ss.TraceError, ShardingTypeError)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROGRAMS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
VALID_TEXT = {
    "spec": ['P("x", None)', 'P(("x", "y"), P.UNCONSTRAINED)', 'PartitionSpec("y", unreduced={"x"})', "P()"],
    "placements": ["[Shard(0), Replicate()]", "[S(1), P(max)]", "(_StridedShard(0, split_factor=2), R)", "[R, R]"],
    "shardy": ['<@mesh, [{"x"}, {"y", ?}p1]>', '<@mesh, [{"y":(1)2}, {}], replicated={"x"}>'],
}
PARSERS = {
    "spec": ss.parse_partition_spec,
    "placements": ss.parse_placements,
    "shardy": lambda t: ss.Sharding.parse(t, ss.Mesh({"x": 2, "y": 4})),
}


@st.composite
def edited(draw, kind: str) -> str:
    """A valid text with a few random insertions, deletions and replacements."""
    text = list(draw(st.sampled_from(VALID_TEXT[kind])))
    alphabet = st.sampled_from(list('()[]{}<>"=,.:?@ xyzPRS0123456789_') + ["999999999999999999999", "\x00", "é"])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        how = draw(st.sampled_from(["insert", "delete", "replace"]))
        if how == "insert":
            text.insert(at, draw(alphabet))
        elif text and at < len(text):
            if how == "delete":
                del text[at]
            else:
                text[at] = draw(alphabet)
    return "".join(text)


@pytest.mark.parametrize("kind", sorted(PARSERS))
@FUZZ
@given(data=st.data())
def test_any_text_parses_or_is_a_sharding_error(kind, data):
    text = data.draw(st.one_of(st.text(max_size=60), edited(kind)))
    try:
        PARSERS[kind](text)
    except ss.ShardingError:
        pass


# -- random programs ------------------------------------------------------------------------------------
SIZES = (1, 2, 3)  # size-1 and uneven axes next to the usual 2


@st.composite
def meshes(draw) -> ss.Mesh:
    names = draw(st.sampled_from([("x",), ("x", "y"), ("x", "y", "z")]))
    return ss.Mesh({n: draw(st.sampled_from(SIZES)) for n in names})


@st.composite
def specs(draw, mesh: ss.Mesh, rank: int):
    """A P over ``mesh`` for a value of ``rank``: each axis on one dim or nowhere (never twice)."""
    dims: list[list[str]] = [[] for _ in range(rank)]
    for name in mesh.axis_names:
        where = draw(st.integers(-1, rank - 1))
        if where >= 0:
            dims[where].append(name)
    return ss.P(*(None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims))


STEPS = ["add", "mul", "where", "matmul", "einsum", "sum", "max", "mean-int", "reshape", "transpose", "broadcast"]


def step(kind: str, x, w):
    """One op of a random program on ``x`` [n, k]; ``w`` a [k, k] input. Keeps [n, k] and exact values."""
    if kind == "add":
        return x + w[0]
    if kind == "mul":
        return x * np.sign(x)
    if kind == "where":
        return np.where(x > 0, x, -x)
    if kind == "matmul":
        return x @ np.sign(w)
    if kind == "einsum":
        return np.einsum("nk,kj->nj", x, np.sign(w))
    if kind == "sum":
        return x - x.sum(axis=1, keepdims=True)
    if kind == "max":
        return x - x.max(axis=0)
    if kind == "mean-int":
        return x + x.sum(axis=0) * 0.0
    if kind == "reshape":
        return x.reshape(-1).reshape(x.shape)
    if kind == "transpose":
        return (x.T * 1.0).T
    return np.broadcast_to(x[:, None, :], (x.shape[0], 2, x.shape[1])).sum(axis=1)


@PROGRAMS
@given(data=st.data())
def test_random_programs_run_bitwise_or_raise_simshards_errors(data):
    mesh = data.draw(meshes())
    n, k = data.draw(st.sampled_from([1, 2, 3, 4, 6])), data.draw(st.sampled_from([1, 2, 3, 4]))
    kinds = data.draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=4))
    in_specs = (data.draw(specs(mesh, 2)), data.draw(specs(mesh, 2)))
    out_spec = data.draw(st.one_of(st.none(), specs(mesh, 2)))
    x, w = ss.exact_inputs([(n, k), (k, k)], seed=data.draw(st.integers(0, 3)))

    def program(x, w):
        for kind in kinds:
            x = step(kind, x, w)
        return x

    try:
        res = ss.run(program, x, w, mesh=mesh, in_shardings=in_specs, out_shardings=out_spec, backend="local")
    except OWN_ERRORS as e:
        event(f"refused: {type(e).__name__}")
        return  # refused, naming the problem: allowed (an uneven P on an explicit type, say)
    event("ran")
    # every output bit for bit; an intermediate may differ only where a sharded sum was reduced
    # after a linear op (a pending sum times 0.0: numpy's sums start from +0.0, so contributions
    # of -0.0 and +0.0 give +0.0 where the whole sum times 0.0 gives -0.0), which opcheck names
    assert all(c.bitwise for c in res.verify.checks) and not res.verify.wrong_ops, res.verify.render()
    assert all(c.bitwise or c.legitimate for c in res.verify.op_checks), res.verify.render()
