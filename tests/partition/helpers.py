"""Shared helpers for the partition tests: run a reshard plan on real data, draw shardings."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from simshard import AxisRef, Mesh, Sharding, layout
from simshard.sharding.axes import merge_adjacent
from simshard.partition.builder import ScheduleBuilder
from simshard.partition.emit import emit_step

try:  # the real executor, once the runtime branch is merged
    from simshard.runtime.local import run_local  # type: ignore
except Exception:  # pragma: no cover - before the merge
    run_local = None

from . import refexec


def exact_values(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    """Non-zero small integers: every sum of them is exact, in any order."""
    v = rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)
    return v.astype(dtype)


def contributions(rng, L, dtype=np.float32) -> dict[int, np.ndarray]:
    """A random local block per device; devices of one reduce group hold independent
    contributions, replicas of one block hold the same data."""
    out = {}
    blocks: dict[tuple, np.ndarray] = {}
    for d in L.devices:
        cls = tuple(L.mesh.axis_index(d, r) for r in L.unreduced)
        key = (cls, tuple(ix.tobytes() for ix in L.index_map[d]))
        if key not in blocks:
            if L.unreduced and L.reduce_op == "prod":
                # signed powers of two: a product of any number of them is exact in any order,
                # where small integers pass float32's 24 bits after a few dozen factors
                blocks[key] = rng.choice(np.array([-2, -1, 1, 2], dtype=dtype), size=L.local_shape(d))
            else:
                blocks[key] = exact_values(rng, L.local_shape(d), dtype)
        out[d] = blocks[key].copy()
    return out


def execute_plan(plan, shards: dict[int, np.ndarray], executor: str = "ref"):
    """Emit the plan for every device and run it; returns (outputs per device, run, step id ranges)."""
    devices = sorted(shards)
    b = ScheduleBuilder(devices)
    src = b.buf()
    buf = src
    ranges = []
    for s in plan.steps:
        start = len(b)
        buf = emit_step(s, b, buf, plan.dtype)
        ranges.append(range(start, len(b)))
    scheds = b.finish([src], [buf], free=False)
    run = refexec.run(scheds, {d: [shards[d]] for d in devices})
    out = {d: run.outputs[d][0] for d in devices}
    if executor == "both" and run_local is not None:
        from simshard.spmd import SpmdProgram

        ex = run_local(SpmdProgram(None, scheds, (None,), (None,)), {d: [shards[d]] for d in devices})
        for d in devices:
            got = ex.outputs[d][0]
            assert got.dtype == out[d].dtype and got.shape == out[d].shape
            assert np.array_equal(got.view(np.uint8), out[d].view(np.uint8)), f"run_local differs on device {d}"
        rec: dict = {}
        for r in ex.records:
            rec.setdefault(r.instr, 0)
            rec[r.instr] += r.bytes_received
            assert r.bytes_received == r.min_bytes, f"run_local: instruction {r.instr} on {r.device} moved {r.bytes_received}, minimum {r.min_bytes}"
        for iid, v in run.received.items():
            assert rec.get(iid, 0) == sum(v.values()), f"instruction {iid}: run_local moved {rec.get(iid, 0)} B, reference {sum(v.values())}"
    return out, run, ranges


def check_plan(plan, rng, dtype=np.float32, executor: str = "both"):
    """Execute ``plan`` on random data: the result must assemble, under the target layout, to the
    source's value bit for bit, and every step must move exactly its analytic minimum."""
    from simshard.partition.reshard.plan import layout_of

    L_src = layout_of(_src_spec(plan), plan.shape)
    L_dst = layout_of(plan.final, plan.shape)
    shards = contributions(rng, L_src, dtype)
    expected = L_src.assemble(shards)
    out, run, ranges = execute_plan(plan, shards, executor)
    for d in L_dst.devices:
        assert out[d].shape == L_dst.local_shape(d), (d, out[d].shape, L_dst.local_shape(d))
        assert out[d].dtype == np.dtype(dtype)
    got = L_dst.assemble(out)
    assert got.dtype == expected.dtype
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8)), f"values differ\n{plan}"
    for s, r in zip(plan.steps, ranges):
        moved = run.total_received(set(r))
        assert moved == s.bytes, f"step {s.describe()}: executor moved {moved} B, plan says {s.bytes}"
        if s.minimum_bytes:
            assert abs(moved / s.minimum_bytes - 1.0) < 1e-9, f"step {s.describe()}: ratio {moved / s.minimum_bytes}"
        else:
            assert moved == 0
    return run


def _src_spec(plan):
    from simshard.partition.reshard.planner import _spec

    return _spec(plan.src, plan.shape, "source")


# -- drawing meshes and shardings --------------------------------------------------------------------
@st.composite
def meshes(draw, max_axes=3, permuted=True, name="mesh"):
    n = draw(st.integers(1, max_axes))
    sizes = [draw(st.sampled_from([1, 2, 2, 3, 4])) for _ in range(n)]
    names = ["x", "y", "z"][:n]
    total = int(np.prod(sizes))
    ids = list(range(total))
    if permuted and draw(st.booleans()):
        ids = draw(st.permutations(ids))
    return Mesh(list(zip(names, sizes)), ids, name=name)


@st.composite
def shapes(draw, rank):
    return tuple(draw(st.sampled_from([1, 2, 3, 4, 5, 6, 8, 12])) for _ in range(rank))


@st.composite
def reshard_cases(draw, ops=("sum", "max")):
    """(mesh, shape, source, target): a random reshard, both shardings pending under one op."""
    mesh = draw(meshes(), label="mesh")
    rank = draw(st.integers(1, 3), label="rank")
    shape = draw(shapes(rank), label="shape")
    op = draw(st.sampled_from(list(ops)), label="op")
    if op == "avg" and 3 in mesh.axis_sizes:  # an average kept pending over 3 devices divides by 3
        op = "sum"
    src = draw(shardings(mesh, rank, reduce_op=op), label="src")
    dst = draw(shardings(mesh, rank, reduce_op=op), label="dst")
    return mesh, shape, src, dst


@st.composite
def shardings(draw, mesh: Mesh, rank: int, pending=True, reduce_op=None):
    """Each axis (or, for axes of 4, each half) goes to a random dim, to the pending set, or nowhere.
    Axes of size 1 are drawn like any other: a sharding may name them, and propagation and the
    partitioner must treat them as the no-ops they are."""
    pieces = []
    for name, n in zip(mesh.axis_names, mesh.axis_sizes):
        if n == 4 and draw(st.booleans()):
            pieces += [AxisRef(name, (1, 2)), AxisRef(name, (2, 2))]
        else:
            pieces.append(AxisRef(name))
    dims = [[] for _ in range(rank)]
    unr = []
    for p in pieces:
        where = draw(st.integers(-2 if pending else -1, rank - 1))
        if where == -1:
            continue
        if where == -2:
            unr.append(p)
        else:
            dims[where].append(p)
    for d in dims:
        order = draw(st.permutations(list(range(len(d)))))
        d[:] = [d[i] for i in order]
    op = reduce_op or draw(st.sampled_from(["sum", "sum", "max"]))
    # the two halves of an axis side by side are the whole axis (a Sharding refuses them)
    return Sharding(mesh, tuple(merge_adjacent(d, mesh.shape) for d in dims), unreduced=merge_adjacent(unr, mesh.shape),
                    reduce_op=op if unr else "sum")
