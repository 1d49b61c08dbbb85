"""The local backend end to end on hand-built SpmdPrograms: matmuls with the contracting dim
sharded (all-reduce / reduce-scatter), assembled with simshard.sharding.layout and compared bitwise;
msgpack round trips; memory peaks and out-of-memory; instruction semantics; records."""


import numpy as np
import pytest

import simshard as ss
from runtime_helpers import same_bits
from simshard.manual import groups
from simshard.spmd import (
    AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Literal, Pad, ReduceScatter, Schedule, Slice,
    SpmdProgram,
)
from simshard.report import exact_inputs
from simshard.runtime import DeviceOutOfMemoryError, ExecutionError, run_local, shard_inputs

DOT = (("contracting", ((1,), (0,))), ("batch", ((), ())))


def group_of(mesh, device, axis):
    return next(g for g in groups(mesh, axis) if device in g)


def matmul_program(mesh, scatter: bool, n=5):
    """a[8,12] on [{x},{y}] @ b[12,n] on [{y},{}]: a local dot gives partial sums over y, then an
    all-reduce (output [{x},{}]) or a reduce-scatter (output [{x},{y}], uneven when n is odd)."""
    prog = ss.trace(lambda a, b: a @ b, ss.ShapeDtype((8, 12)), ss.ShapeDtype((12, n)))
    sa = ss.Sharding.parse('<@mesh, [{"x"}, {"y"}]>', mesh)
    sb = ss.Sharding.parse('<@mesh, [{"y"}, {}]>', mesh)
    out = ss.Sharding.parse('<@mesh, [{"x"}, {"y"}]>' if scatter else '<@mesh, [{"x"}, {}]>', mesh)
    block = -(-n // mesh.shape["y"])
    splits = tuple(max(0, min(block, n - k * block)) for k in range(mesh.shape["y"]))
    scheds = []
    for d in mesh.device_ids:
        g = group_of(mesh, d, "y")
        red = (
            ReduceScatter(1, "%2 dot_general", src=2, dst=3, group=g, axis=1, splits=splits, axes=("y",))
            if scatter
            else AllReduce(1, "%2 dot_general", src=2, dst=3, group=g, axes=("y",))
        )
        instrs = (Compute(0, "%2 dot_general", op="dot_general", inputs=(0, 1), outputs=(2,), params=DOT), red,
                  Free(2, "%2 dot_general", bufs=(0, 1, 2)))
        scheds.append(Schedule(d, (0, 1), instrs, (3,)))
    return SpmdProgram(prog, tuple(scheds), (sa, sb), (out,))


MESHES = [
    ss.Mesh({"x": 2, "y": 2}),
    ss.Mesh({"x": 2, "y": 2}, device_ids=[3, 1, 0, 2]),
    ss.Mesh({"x": 1, "y": 4}),
    ss.Mesh({"x": 2, "y": 3}),
]


@pytest.mark.parametrize("scatter", [False, True], ids=["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: repr(m))
def test_matmul_contracting_sharded_end_to_end(mesh, scatter):
    spmd = matmul_program(mesh, scatter)
    a, b = exact_inputs(spmd.program, seed=3)
    ex = run_local(spmd, shard_inputs(spmd, a, b))
    (out,) = ex.assemble()
    (ref,) = ss.evaluate(spmd.program, a, b)
    assert same_bits(out, ref)
    # one record per collective per device, each at the analytic minimum
    assert len(ex.records) == mesh.size
    for r in ex.records:
        assert r.bytes_received == r.min_bytes and r.kind == ("reduce_scatter" if scatter else "all_reduce")
        assert r.axes == ("y",) and r.source == "%2 dot_general"
    g = mesh.shape["y"]
    partial = 4 * 5 * 4 if mesh.shape["x"] == 2 else 8 * 5 * 4  # bytes of one device's partial sum
    per_group = (2 if not scatter else 1) * (g - 1) * partial  # 2(g-1)/g or (g-1)/g of the group's data, x g
    assert ex.comm.total_bytes == ex.comm.total_min_bytes == mesh.shape["x"] * per_group


def test_float_matmul_is_bitwise_reproducible_and_order_is_canonical():
    # Non-exact floats: the result is the left fold of the partial products in group order,
    # the same bits on every run.
    mesh = ss.Mesh({"x": 1, "y": 4})
    spmd = matmul_program(mesh, scatter=False)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 12)).astype(np.float32)
    b = rng.standard_normal((12, 5)).astype(np.float32)
    shards = shard_inputs(spmd, a, b)
    (o1,) = run_local(spmd, shards).assemble()
    (o2,) = run_local(spmd, shards).assemble()
    assert same_bits(o1, o2)
    parts = [shards[d][0] @ shards[d][1] for d in groups(mesh, "y")[0]]
    ref = parts[0]
    for p in parts[1:]:
        ref = ref + p
    assert same_bits(o1, ref)


def test_msgpack_round_tripped_schedules_run_identically():
    mesh = ss.Mesh({"x": 2, "y": 3})
    spmd = matmul_program(mesh, scatter=True)
    back = SpmdProgram(
        spmd.program, tuple(Schedule.from_bytes(s.to_bytes()) for s in spmd.schedules), spmd.in_shardings,
        spmd.out_shardings,
    )
    a, b = exact_inputs(spmd.program, seed=1)
    e1 = run_local(spmd, shard_inputs(spmd, a, b))
    e2 = run_local(back, shard_inputs(back, a, b))
    for d in spmd.devices:
        assert all(same_bits(x, y) for x, y in zip(e1.shards(d), e2.shards(d)))
    assert e1.records == e2.records
    assert e1.memory == e2.memory


# -- memory ---------------------------------------------------------------------------------------------


def test_peak_memory_counts_each_instruction_working_set():
    mesh = ss.Mesh({"x": 2, "y": 2})
    spmd = matmul_program(mesh, scatter=False)
    a, b = exact_inputs(spmd.program, seed=0)
    ex = run_local(spmd, shard_inputs(spmd, a, b))
    ins = 4 * 6 * 4 + 6 * 5 * 4  # local a[4,6] and b[6,5], float32
    partial = 4 * 5 * 4
    for d in mesh.device_ids:
        m = ex.memory[d]
        assert m.input_bytes == ins
        assert m.peak_bytes == ins + 2 * partial  # the all-reduce output while its input is live
        assert m.peak_instr == 1 and m.peak_source == "%2 dot_general"
        assert m.final_bytes == partial


def test_out_of_memory_names_device_instruction_and_bytes():
    mesh = ss.Mesh({"x": 2, "y": 2})
    spmd = matmul_program(mesh, scatter=False)
    a, b = exact_inputs(spmd.program, seed=0)
    ins, partial = 4 * 6 * 4 + 6 * 5 * 4, 4 * 5 * 4
    # enough for the inputs and the local dot, not for the all-reduce's output as well
    with pytest.raises(DeviceOutOfMemoryError) as err:
        run_local(spmd, shard_inputs(spmd, a, b), device_memory={2: ins + partial + 8})
    e = err.value
    assert e.device == 2 and e.instr == 1 and e.position == 1 and e.source == "%2 dot_general"
    assert e.needed == ins + 2 * partial and e.capacity == ins + partial + 8
    msg = str(e)
    assert "device 2 out of memory" in msg and "all_reduce" in msg and "'%2 dot_general'" in msg
    assert f"({ins + 2 * partial} bytes" in msg and "capacity" in msg and "B" in msg
    # the same capacity for every device: the first device to fail is reported
    with pytest.raises(DeviceOutOfMemoryError, match="out of memory placing its inputs"):
        run_local(spmd, shard_inputs(spmd, a, b), device_memory=ins - 1)
    run_local(spmd, shard_inputs(spmd, a, b), device_memory=ins + 2 * partial)  # exactly enough


# -- instruction semantics ----------------------------------------------------------------------------


def one_device(instrs, inputs, outputs):
    spmd = SpmdProgram(None, (Schedule(0, tuple(range(len(inputs))), tuple(instrs), tuple(outputs)),), (), ())
    return run_local(spmd, {0: inputs}).shards(0)


def test_literal_slice_pad_free():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    outs = one_device(
        [
            Literal(0, "c", dst=1, value=np.float32(2.0)),
            Compute(1, "mul", op="mul", inputs=(0, 1), outputs=(2,)),
            Slice(2, "s", src=2, dst=3, index=((0, 2), (1, 2, 3))),  # non-contiguous rows
            Slice(3, "s", src=2, dst=4, index=((1, 2), ())),  # an empty dim
            Pad(4, "p", src=3, dst=5, shape=(3, 5), value=np.float32(-np.inf)),
            Literal(5, "c", dst=6, value=np.arange(3, dtype=np.int16)),
            Free(6, "", bufs=(0, 1, 2)),
        ],
        [x],
        (5, 4, 6),
    )
    padded, empty, lit = outs
    ref = np.full((3, 5), -np.inf, np.float32)
    ref[:2, :3] = (x * 2)[[0, 2]][:, 1:]
    assert same_bits(padded, ref)
    assert empty.shape == (2, 0) and empty.dtype == np.float32
    assert same_bits(lit, np.arange(3, dtype=np.int16))


def test_errors_name_device_and_instruction():
    x = np.zeros((2, 2))
    with pytest.raises(ExecutionError, match=r"device 0 at position 0 \[4\] compute mul from 'op': reads buffer b9, which it does not hold \(held: b0\)"):
        one_device([Compute(4, "op", op="mul", inputs=(0, 9), outputs=(1,))], [x], (1,))
    with pytest.raises(ExecutionError, match=r"device 0 at position 0 \[0\] compute no_such_op.*no op named 'no_such_op'"):
        one_device([Compute(0, "", op="no_such_op", inputs=(0,), outputs=(1,))], [x], (1,))
    with pytest.raises(ExecutionError, match=r"at position 1 \[7\] compute dot_general from '%3 dot' on \(float64\[2, 2\], float64\[3\]\)"):
        one_device(
            [Literal(6, "", dst=1, value=np.zeros(3)), Compute(7, "%3 dot", op="dot_general", inputs=(0, 1), outputs=(2,), params=DOT)],
            [x], (2,),
        )
    with pytest.raises(ExecutionError, match="frees buffer b5, which it does not hold"):
        one_device([Free(0, "", bufs=(5,))], [x], (0,))
    with pytest.raises(ExecutionError, match="psum runs only inside a manual region"):
        one_device([Compute(0, "", op="psum", inputs=(0,), outputs=(1,), params=(("axis_name", "x"),))], [x], (1,))
    with pytest.raises(ExecutionError, match="cannot pad a float64\\[2, 2\\] buffer to shape \\[1, 2\\]"):
        one_device([Pad(0, "", src=0, dst=1, shape=(1, 2), value=0.0)], [x], (1,))


def test_every_collective_instruction_in_one_schedule():
    """A 4-device schedule using each collective kind; values against numpy, bytes at the minimum."""
    mesh = ss.Mesh({"x": 2, "y": 2})
    rng = np.random.default_rng(5)
    xs = {d: rng.integers(-5, 6, size=(4, 6)).astype(np.float32) for d in mesh.device_ids}
    scheds = []
    for d in mesh.device_ids:
        gx, gy = group_of(mesh, d, "x"), group_of(mesh, d, "y")
        scheds.append(Schedule(d, (0,), (
            AllGather(0, "ag", src=0, dst=1, group=gy, axis=0, axes=("y",)),  # [8, 6]
            ReduceScatter(1, "rs", src=1, dst=2, group=gx, axis=1, splits=(4, 2), axes=("x",)),  # [8, 4|2]
            AllToAll(2, "a2a", src=0, dst=3, group=gy, split_axis=1, splits=(1, 5), concat_axis=0, axes=("y",)),
            AllReduce(3, "ar", src=0, dst=4, group=(0, 1, 2, 3), reduce_op="max", axes=("x", "y")),
            CollectivePermute(4, "cp", src=0, dst=5, pairs=((0, 3), (3, 0), (1, 2)), shape=(4, 6), dtype="float32"),
        ), (1, 2, 3, 4, 5)))
    spmd = SpmdProgram(None, tuple(scheds), (), ())
    ex = run_local(spmd, {d: [xs[d]] for d in mesh.device_ids})
    for d in mesh.device_ids:
        ag, rs, a2a, ar, cp = ex.shards(d)
        gx, gy = group_of(mesh, d, "x"), group_of(mesh, d, "y")
        assert same_bits(ag, np.concatenate([xs[p] for p in gy]))
        full = sum(np.concatenate([xs[q] for q in group_of(mesh, p, "y")]) for p in gx)
        assert same_bits(rs, full[:, :4] if gx.index(d) == 0 else full[:, 4:])
        j = gy.index(d)
        assert same_bits(a2a, np.concatenate([xs[p][:, [0] if j == 0 else slice(1, 6)] for p in gy]))
        assert same_bits(ar, np.maximum.reduce([xs[p] for p in (0, 1, 2, 3)]))
        src = {3: 0, 0: 3, 2: 1}.get(d)
        assert same_bits(cp, xs[src] if src is not None else np.zeros((4, 6), np.float32))
    for r in ex.records:
        assert r.bytes_received == r.min_bytes, r
    per_instr = {}
    for r in ex.records:
        per_instr.setdefault(r.instr, [0, 0, 0])
        per_instr[r.instr][0] += r.bytes_sent
        per_instr[r.instr][1] += r.bytes_received
        per_instr[r.instr][2] += r.min_bytes
    assert all(s == rcv == m for s, rcv, m in per_instr.values())
    assert {r.device for r in ex.records if r.instr == 4} == {0, 1, 2, 3}  # every device named in a pair
    cp = [r for r in ex.records if r.instr == 4 and r.device == 1][0]
    assert cp.bytes_sent == 96 and cp.bytes_received == 0 and cp.peers == ((2, 96, 0),)


def test_inputs_are_checked():
    spmd = matmul_program(ss.Mesh({"x": 1, "y": 2}), scatter=False)
    with pytest.raises(ValueError, match="no inputs for devices \\[1\\]"):
        run_local(spmd, {0: [np.zeros((8, 6)), np.zeros((6, 5))]})
    with pytest.raises(ValueError, match="device 0's schedule takes 2 input shards, got 1"):
        run_local(spmd, {0: [np.zeros(1)], 1: [np.zeros(1), np.zeros(1)]})


def test_run_local_inside_a_running_event_loop():
    import asyncio

    spmd = matmul_program(ss.Mesh({"x": 1, "y": 2}), scatter=False)
    a, b = exact_inputs(spmd.program)

    async def caller():
        return run_local(spmd, shard_inputs(spmd, a, b))

    (out,) = asyncio.run(caller()).assemble()
    assert same_bits(out, a @ b)


# -- many collectives, many devices: no false deadlock, same bits and records as a plain transport -------


def random_spmd(seed, mesh):
    """A valid SPMD program of 40 random collectives over mesh-axis groups, shapes kept [4, 6]."""
    rng = np.random.default_rng(seed)
    ops = []
    for k in range(40):
        axis = str(rng.choice(mesh.axis_names))
        ops.append((int(rng.integers(0, 6)), axis, str(rng.choice(["sum", "max", "min", "avg"]))))
    scheds = []
    for d in mesh.device_ids:
        instrs, nid = [], 0
        for kind, axis, red in ops:
            g = group_of(mesh, d, axis)
            n = len(g)
            if kind == 0:
                instrs.append(AllReduce(nid, f"op{nid}", src=0, dst=0, group=g, reduce_op=red, axes=(axis,)))
            elif kind == 1:  # reduce-scatter then gather back, uneven splits
                splits = tuple([6 - (n - 1)] + [1] * (n - 1))
                instrs.append(ReduceScatter(nid, f"op{nid}", src=0, dst=1, group=g, axis=1, splits=splits, reduce_op=red, axes=(axis,)))
                nid += 1
                instrs.append(AllGather(nid, f"op{nid}", src=1, dst=0, group=g, axis=1, axes=(axis,)))
            elif kind == 2 and 4 % n == 0:
                instrs.append(AllToAll(nid, f"op{nid}", src=0, dst=0, group=g, split_axis=0, splits=(4 // n,) * n, concat_axis=0, axes=(axis,)))
            elif kind == 3:
                pairs = tuple((g[i], g[(i + 1) % n]) for i in range(n))
                instrs.append(CollectivePermute(nid, f"op{nid}", src=0, dst=0, pairs=pairs, shape=(4, 6), dtype="float32", axes=(axis,)))
            else:
                instrs.append(Compute(nid, f"op{nid}", op="add", inputs=(0, 0), outputs=(0,)))
            nid += 1
        scheds.append(Schedule(d, (0,), tuple(instrs), (0,)))
    return SpmdProgram(None, tuple(scheds), (), ())


@pytest.mark.parametrize("seed", range(3))
def test_random_collective_programs_match_a_transport_without_a_global_view(seed):
    import asyncio

    from runtime_helpers import BlindTransport
    from simshard.runtime import Executor

    mesh = ss.Mesh({"x": 2, "y": 4}, device_ids=list(np.random.default_rng(seed).permutation(8)))
    spmd = random_spmd(seed, mesh)
    rng = np.random.default_rng(seed + 100)
    inputs = {d: [rng.standard_normal((4, 6)).astype(np.float32)] for d in mesh.device_ids}
    ex = run_local(spmd, inputs)

    async def blind():
        t = BlindTransport(spmd.devices, timeout=5.0)
        exs = [Executor(s, t) for s in spmd.schedules]
        outs = await asyncio.gather(*(e.run(inputs[e.device]) for e in exs))
        return outs, [r for e in exs for r in e.records]

    outs, records = asyncio.run(blind())
    for s, o in zip(spmd.schedules, outs):
        assert same_bits(ex.shards(s.device)[0], o[0])
    assert tuple(records) == ex.records
    assert all(r.bytes_received == r.min_bytes for r in ex.records)


def test_placement_round_trip_and_its_checks():
    from simshard.errors import ShardingError
    from simshard.runtime import assemble_outputs

    mesh = ss.Mesh({"x": 2, "y": 2})
    s = ss.Sharding.parse('<@mesh, [{"x", "y"}, {}]>', mesh)  # 6 rows over 4 devices: 2, 2, 2, 0
    identity = tuple(Schedule(d, (0, 1), (), (0, 1)) for d in mesh.device_ids)
    spmd = SpmdProgram(None, identity, (s, None), (s, None))
    x = np.arange(18.0).reshape(6, 3)
    shards = shard_inputs(spmd, x, np.float32(7))
    assert [shards[d][0].shape for d in range(4)] == [(2, 3), (2, 3), (2, 3), (0, 3)]  # unpadded
    ex = run_local(spmd, shards)
    with pytest.raises(ValueError, match="carries no Program; pass the outputs' global shapes"):
        ex.assemble()
    out, seven = ex.assemble(shapes=[(6, 3), ()])
    assert same_bits(out, x) and same_bits(seven, np.float32(7))
    padded = {d: [np.zeros((2, 3)), np.float32(7)] for d in range(4)}  # device 3 left its padding on
    with pytest.raises(ShardingError, match="device 3 holds a shard of shape \\(2, 3\\), its layout says \\(0, 3\\)"):
        assemble_outputs(spmd, padded, [(6, 3), ()])


def test_timeline_has_one_span_per_instruction_in_schedule_order():
    import simshard as ss

    mesh = ss.Mesh({"x": 2, "y": 2})
    x, w = ss.exact_inputs([(4, 8), (8, 4)], seed=0)
    res = ss.run(lambda x, w: x @ w, x, w, mesh=mesh, in_shardings=(ss.P("x", "y"), ss.P("y", None)), backend="local")
    tl = res.execution.timeline
    assert set(tl) == set(mesh.device_ids)
    for d, spans in tl.items():
        sched = res.spmd.schedule(d)
        assert [(sp.position, sp.instr, sp.kind) for sp in spans] == [
            (i, ins.id, ins.kind) for i, ins in enumerate(sched.instrs)]
        assert all(sp.device == d and sp.start <= sp.end for sp in spans)
        assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))  # one device runs one instruction at a time
    assert any(sp.kind == "all_reduce" for spans in tl.values() for sp in spans)


def test_kernels_give_the_same_bits_whatever_blas_thread_count():
    """The local backend runs its kernels on one BLAS thread (simshard.ops.threads), as a device
    actor does: the caller's thread setting changes nothing (Gaussian inputs: no exact sums)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((128, 256), dtype=np.float32), rng.standard_normal((256, 512), dtype=np.float32)
    mesh = ss.Mesh({"x": 2})
    outs = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
            res = ss.run(lambda a, b: a @ b, a, b, mesh=mesh, in_shardings=(ss.P("x", None), None), backend="local")
        outs.append(res.outputs.tobytes())
    assert outs[0] == outs[1]


def test_a_failed_run_does_not_chain_the_event_loop_probe():
    """run_local asks whether a loop is running; the answer ("no running event loop") is not the
    context of a failure of the run itself, which the user reads."""
    from simshard.spmd import Compute, Schedule, SpmdProgram
    from simshard.runtime import ExecutionError

    bad = Compute(0, "bad", op="reshape", inputs=(0,), outputs=(1,), params=(("new_shape", (7,)),))
    spmd = SpmdProgram(None, tuple(Schedule(d, (0,), (bad,), (1,)) for d in (0, 1)), (), ())
    with pytest.raises(ExecutionError) as e:
        run_local(spmd, {d: [np.zeros(4, np.float32)] for d in (0, 1)})
    chain, err = [], e.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert not any("no running event loop" in str(x) for x in chain)


def test_a_run_collects_garbage_less_often_and_restores_the_thresholds():
    """While devices run, the collector's thresholds are at least the device hosts' (a full pass
    over the heap every few hundred messages cost long runs a third of their time); afterwards the
    process's own come back, and a collector switched off (threshold 0) stays off."""
    import gc

    from simshard.runtime.core.gc_policy import RUN_THRESHOLD

    seen = []

    def probe(x):
        seen.append(gc.get_threshold())
        return (x,)

    from dataclasses import replace

    from simshard.ops.registry import OPS

    saved = gc.get_threshold()
    spmd = SpmdProgram(None, tuple(Schedule(d, (0,), (Compute(0, "copy", op="probe_gc", inputs=(0,), outputs=(1,)),), (1,))
                                   for d in (0, 1)), (), ())
    OPS["probe_gc"] = replace(OPS["neg"], name="probe_gc", kernel=probe)  # records the thresholds it runs under
    try:
        for thresholds in ((700, 10, 10), (0, 10, 10)):
            gc.set_threshold(*thresholds)
            seen.clear()
            run_local(spmd, {d: [np.zeros(2, np.float32)] for d in (0, 1)})
            assert seen and all(t == (thresholds if thresholds[0] == 0 else RUN_THRESHOLD) for t in seen)
            assert gc.get_threshold() == thresholds
    finally:
        gc.set_threshold(*saved)
        OPS.pop("probe_gc", None)
