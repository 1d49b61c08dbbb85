"""``ss.run`` end to end on the local backend: trace, propagate, partition, execute, verify, report."""

import numpy as np
import pytest

import simshard as ss
from simshard import DTensorSpec, NamedSharding, P, Replicate, Shard
from simshard.manual import ppermute, shard_map

MESH = ss.Mesh({"x": 2, "y": 4})
MEGATRON = (P("x", None), P(None, "y"), P("y", None))


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


@pytest.fixture(scope="module")
def args():
    return ss.exact_inputs([(16, 32), (32, 64), (64, 32)], seed=0)


@pytest.fixture(scope="module")
def megatron(args):
    return ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON)


def test_megatron_mlp_bitwise_with_one_all_reduce_over_y(megatron, args):
    res = megatron
    assert res.verify.bitwise, str(res.verify)
    assert np.array_equal(res.outputs, mlp(*args))
    # the row-parallel matmul leaves partial sums over y: one all-reduce, nothing else
    assert {(r.kind, r.axes) for r in res.comm.records} == {("all_reduce", ("y",))}
    assert len({r.instr for r in res.comm.records}) == 1
    assert len(res.comm.records) == 8  # one record per device
    # y is the local output block [8, 32] float32 = 1 KiB, all-reduced in groups of g = 4:
    # 2(g-1)/g of it per device
    block = 8 * 32 * 4
    assert all(res.comm.bytes_sent(d) == 2 * 3 * block // 4 for d in range(8))
    assert res.comm.total_bytes == 8 * 2 * 3 * block // 4 == 12288
    assert res.comm.ratio == 1.0
    assert {r.group for r in res.comm.records} == {(0, 1, 2, 3), (4, 5, 6, 7)}
    assert res.memory.table() is not None


def test_shards_and_schedule_listing(megatron):
    res = megatron
    assert [s.shape for s in res.shards(5)] == [(8, 32)]
    assert np.array_equal(res.shards(5)[0], res.outputs[8:])
    text = res.spmd.schedule(3).pretty()
    assert text.startswith("schedule(device 3)")
    assert "all_reduce" in text and "group=(0, 1, 2, 3)" in text and "dot_general" in text


def test_comm_json_round_trips(megatron):
    back = ss.CommReport.from_json(megatron.comm.to_json())
    assert back.total_bytes == megatron.comm.total_bytes and back.records == megatron.comm.records


def test_jit_with_shardings_given_to_jit(args):
    f = ss.jit(mlp, in_shardings=tuple(NamedSharding(MESH, p) for p in MEGATRON))
    res = ss.run(f, *args)
    assert res.verify.bitwise
    assert res.comm.total_bytes == 12288
    with pytest.raises(TypeError, match="not both"):
        ss.run(f, *args, in_shardings=MEGATRON)


def test_dtensor_spec_in_shardings(args):
    dt = (DTensorSpec(MESH, [Shard(0), Replicate()]), DTensorSpec(MESH, [Replicate(), Shard(1)]),
          DTensorSpec(MESH, [Replicate(), Shard(0)]))
    res = ss.run(mlp, *args, mesh=MESH, in_shardings=dt)
    assert res.verify.bitwise and res.comm.total_bytes == 12288
    assert str(res.program.sharding_of(res.program.inputs[1])) == '<@mesh, [{}, {"y"}]>'


def test_shardy_text_in_shardings(args):
    text = ('<@mesh, [{"x"}, {}]>', '<@mesh, [{}, {"y"}]>', '<@mesh, [{"y"}, {}]>')
    res = ss.run(mlp, *args, mesh=MESH, in_shardings=text, out_shardings='<@mesh, [{"x"}, {"y"}]>')
    assert res.verify.bitwise
    assert [s.shape for s in res.shards(0)] == [(8, 8)]
    with pytest.raises(ss.ShardingError, match="mesh="):
        ss.run(mlp, *args, in_shardings=text)


def test_out_shardings_set_the_output_layout(args):
    res = ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, out_shardings=P("x", "y"))
    assert res.verify.bitwise
    # the pending sum over y lands sharded on y: a reduce-scatter instead of the all-reduce
    assert {r.kind for r in res.comm.records} == {"reduce_scatter"}
    assert res.comm.total_bytes == 8 * 3 * (8 * 8 * 4)  # (g-1) chunks of [8, 8] per device
    lay = ss.layout(NamedSharding(MESH, P("x", "y")), (16, 32))
    for d in range(8):
        assert np.array_equal(res.shards(d)[0], lay.shard(res.outputs)[d])


def test_pytree_inputs_and_outputs():
    p = np.arange(16.0).reshape(4, 4)
    q = np.arange(8.0)

    def tree(d):
        return {"a": d["p"] + 1, "b": (d["q"] * 2, d["p"])}

    res = ss.run(tree, {"p": p, "q": q}, mesh=MESH, in_shardings=({"p": P("x", "y"), "q": P("y")},))
    assert res.verify.bitwise
    assert set(res.outputs) == {"a", "b"} and isinstance(res.outputs["b"], tuple)
    assert np.array_equal(res.outputs["a"], p + 1)
    assert np.array_equal(res.outputs["b"][0], q * 2)
    assert np.array_equal(res.outputs["b"][1], p)


def test_device_memory_too_small_is_an_out_of_memory(args):
    from simshard.runtime.errors import DeviceOutOfMemoryError

    # inputs take 5 KiB per device, the first matmul peaks at 5.5 KiB
    with pytest.raises(DeviceOutOfMemoryError) as e:
        ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, device_memory=5500)
    err = e.value
    assert isinstance(err, MemoryError)
    assert err.device == 0 and err.capacity == 5500 and err.needed == 5632
    assert "dot_general" in err.source
    msg = str(err)
    assert "device 0" in msg and "dot_general" in msg and "5632 bytes" in msg and "5500 bytes" in msg
    # the same run fits in 5.5 KiB
    assert ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, device_memory=5632).memory.table() is not None


def test_device_memory_per_device_mapping(args):
    from simshard.runtime.errors import DeviceOutOfMemoryError

    # timeout: the other devices wait at the all-reduce for device 6 until the run gives up
    with pytest.raises(DeviceOutOfMemoryError, match="device 6"):
        ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, device_memory={6: 1000}, timeout=1.0)


def test_sharding_that_does_not_fit_the_array_is_a_clear_error(args):
    with pytest.raises(ss.ShardingError, match="rank-mismatch.*input x.*3 entries.*rank 2"):
        ss.run(mlp, *args, mesh=MESH, in_shardings=(P("x", None, None), P(None, "y"), P("y", None)))


def test_arrays_whose_shapes_do_not_fit_the_program_are_a_clear_error(args):
    x, w1, w2 = args
    with pytest.raises(ss.TraceError, match="contracting dims.*31.*32"):
        ss.run(mlp, x[:, :31], w1, w2, mesh=MESH, in_shardings=MEGATRON)


def test_output_sharding_on_a_mesh_over_other_devices_is_a_clear_error(args):
    other = ss.Mesh({"z": 16}, name="other")
    with pytest.raises(ss.ShardingError, match="wrong-mesh.*output 0.*@other of 16 devices"):
        ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, out_shardings=NamedSharding(other, P("z", None)))


def test_unknown_backend(args):
    with pytest.raises(ValueError, match="unknown backend"):
        ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON, backend="tpu")


@pytest.mark.parametrize(
    "src, dst, collectives, total",
    [
        (P("x", None), P(None, None), ("all_gather",), 8 * 16 * 4 // 2 * 8),  # every device gets the other half
        (P("x", None), P(None, "x"), ("all_to_all",), 1024),
        (P(None, "y"), P("x", None), ("all_gather",), 1536),  # slice x locally first, gather y last
    ],
)
def test_plan_reshard_classics_at_the_minimum(src, dst, collectives, total):
    plan = ss.plan_reshard(NamedSharding(MESH, src), NamedSharding(MESH, dst), (8, 16))
    assert plan.collectives == collectives
    assert plan.bytes == total == plan.minimum_bytes
    assert all(s.ratio == 1.0 for s in plan.steps if s.collective)
    assert "ratio 1.00" in str(plan)


def test_plan_reshard_partial_to_shard_is_a_reduce_scatter():
    m = ss.Mesh({"x": 4})
    plan = ss.plan_reshard(DTensorSpec(m, [ss.Partial()]), DTensorSpec(m, [Shard(0)]), (8, 16))
    assert plan.collectives == ("reduce_scatter",)
    assert plan.bytes == plan.minimum_bytes == 4 * 3 * (2 * 16 * 4)


def ring(a):
    acc, buf = a, a
    for _ in range(3):
        buf = ppermute(buf, "y", [(i, (i + 1) % 4) for i in range(4)])
        acc = acc + buf
    return acc


def test_manual_ring_all_reduce_with_ppermute_runs_bitwise():
    x = np.arange(32.0).reshape(8, 4)

    def f(a):
        return shard_map(ring, mesh=MESH, in_specs=P(None, "y"), out_specs=P(), check_rep=False)(a)  # a ppermute ring

    res = ss.run(f, x, mesh=MESH, in_shardings=(P(None, "y"),))
    assert res.verify.bitwise, str(res.verify)
    assert np.array_equal(res.outputs, x.sum(axis=1, keepdims=True))
    kinds = res.comm.summary("kind")
    assert [k["kind"] for k in kinds] == ["collective_permute"]
    assert kinds[0]["collectives"] == 3
    # each step every device sends its [8, 1] float64 block to its ring neighbour
    assert res.comm.total_bytes == 3 * 8 * (8 * 8)


def test_cli_main_job_prints_bitwise_identical(capsys, monkeypatch):
    from simshard.__main__ import main

    monkeypatch.setenv("COLUMNS", "120")
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "bitwise identical" in out
    assert "all_reduce" in out and "12.00 KiB" in out


def test_one_device_failing_stops_its_peers_at_once():
    """Peers blocked in a receive from the failed device are cancelled, not left to time out."""
    import time

    mesh = ss.Mesh({"x": 2, "y": 4})
    x, w1, w2 = ss.exact_inputs([(16, 32), (32, 64), (64, 32)])
    start = time.perf_counter()
    with pytest.raises(Exception) as e:
        ss.run(lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2, x, w1, w2, mesh=mesh,
               in_shardings=(ss.P("x", None), ss.P(None, "y"), ss.P("y", None)), device_memory={6: 1000}, timeout=10.0)
    assert type(e.value).__name__ == "DeviceOutOfMemoryError" and "device 6" in str(e.value)
    assert time.perf_counter() - start < 5.0  # the receive timeout is 10 s


def test_progress_names_each_stage(args):
    stages = []
    ss.run(mlp, *args, mesh=ss.Mesh({"x": 2, "y": 4}), in_shardings=(P("x", None), P(None, "y"), P("y", None)),
           backend="local", progress=stages.append)
    assert stages == ["tracing and propagating", "partitioning", "running on 8 devices in this process",
                      "verifying against numpy"]


def test_reference_catches_a_manual_region_that_agrees_with_itself():
    from simshard.manual import psum

    mesh = ss.Mesh({"x": 2, "y": 2})
    x, w = ss.exact_inputs([(4, 8), (8, 4)], seed=0)

    def wrong(x, w):  # sums over both axes: the two x slices get added together
        return psum(x @ w, ("x", "y"))

    f = shard_map(wrong, mesh=mesh, in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", None))
    alone = ss.run(f, x, w, mesh=mesh, backend="local")
    assert alone.verify.bitwise  # the region run whole shares the body's mistake
    checked = ss.run(f, x, w, mesh=mesh, backend="local", reference=lambda x, w: x @ w)
    assert not checked.verify.bitwise and not checked.verify.ok


# -- a new user's mistakes (issue 11) ---------------------------------------------------------------
def test_a_mesh_without_shardings_runs_replicated_on_it():
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    res = ss.run(lambda a: a + 1, a, mesh=ss.Mesh({"x": 2}), backend="local")
    assert res.verify.bitwise
    assert res.spmd.devices == (0, 1)


@pytest.mark.parametrize("kw, words", [
    (dict(out_sharding=ss.P("x")), "'out_sharding'; did you mean 'out_shardings'?"),
    (dict(algoritm="ring"), "did you mean 'algorithm'?"),
    (dict(retries=2), "'retries': it is an option of another backend, not of backend='local'"),
])
def test_an_unknown_keyword_is_refused_naming_it(kw, words):
    with pytest.raises(TypeError) as e:
        ss.run(lambda a: a + 1, np.ones((4, 4), np.float32), mesh=ss.Mesh({"x": 2}), backend="local", **kw)
    assert words in str(e.value)


# -- DTensor spellings: placement text and bare placement lists with mesh= ---------------------------
def test_placement_lists_and_text_wherever_a_sharding_goes(args):
    """in_shardings / out_shardings take bare placement lists and placement text (one mechanism:
    ``sharding.spelling``), mixed with P; the run is the Megatron run of the P spelling."""
    ref = ss.run(mlp, *args, mesh=MESH, in_shardings=MEGATRON)
    res = ss.run(mlp, *args, mesh=MESH, in_shardings=([Shard(0), Replicate()], "[R, S(1)]", P("y", None)),
                 out_shardings="[Shard(0), Replicate()]")
    assert res.verify.bitwise and np.array_equal(res.outputs, mlp(*args))
    assert res.program.in_shardings == ref.program.in_shardings
    assert res.comm.total_bytes == ref.comm.total_bytes
    one = ss.run(lambda a: a * 2, args[0], mesh=MESH, in_shardings=[Replicate(), Shard(1)])  # one list: every argument
    assert str(one.program.in_shardings[0]) == '<@mesh, [{}, {"y"}]>'


def test_a_bad_in_sharding_names_the_argument_not_the_array(args):
    x = args[0]
    with pytest.raises(ss.ShardingError) as e:
        ss.run(lambda a: a * 2, x, mesh=MESH, in_shardings=((P("x"), P("y")),))
    msg = str(e.value)
    assert "in_shardings[0] (argument a)" in msg and "float32[16, 32] array" in msg
    assert str(x[0, 0]) not in msg and "array([" not in msg
    with pytest.raises(ss.ShardingError, match=r"^no-mesh: input a: the placement list \[S\(0\), R\] needs a mesh"):
        ss.run(lambda a: a * 2, x, in_shardings=[Shard(0), Replicate()])


def test_reshard_and_constraints_take_dtensor_spellings(args):
    x = args[0]

    def f(a):
        b = ss.reshard(a * 2, DTensorSpec(MESH, [Replicate(), Shard(1)]))
        c = ss.with_sharding_constraint(b + 1, [Shard(1), Replicate()])
        return ss.reshard(c, "[S(0), S(0)]")

    res = ss.run(f, x, mesh=MESH, in_shardings="[S(0), R]")
    assert res.verify.bitwise and np.array_equal(res.outputs, (x * 2 + 1))
    lines = res.program.pretty()
    assert 'reshard(%1, sharding=<@mesh, [{}, {"y"}]>)' in lines
    assert 'sharding_constraint(%3, sharding=<@mesh, [{}, {"x"}]>)' in lines
    assert '[{"x", "y"}, {}]' in lines


def test_reshard_to_a_layout_only_placements_state_keeps_it():
    """10 rows as [S(0), S(0)] over 2x4 (2,2,1,0 | 2,2,1,0): no Sharding lays them out so; the
    value keeps the placements' layout, and the element-wise op after it runs where it lies."""
    x = np.arange(30, dtype=np.float32).reshape(10, 3)

    def g(a):
        return ss.reshard(a, "[S(0), S(0)]") * 3.0

    res = ss.run(g, x, mesh=MESH, in_shardings="[S(0), S(0)]", out_shardings="[S(0), S(0)]")
    assert res.verify.bitwise and res.comm.total_bytes == 0
    rows = [len(res.shards(d)[0]) for d in range(8)]
    assert rows == [2, 2, 1, 0, 2, 2, 1, 0]


def test_explicit_mode_refuses_a_layout_no_type_states():
    mesh = ss.Mesh({"x": 2, "y": 4}, axis_types=(ss.AxisType.Explicit,) * 2)

    def g(a):
        return ss.reshard(a, "[S(0), S(0)]")

    with pytest.raises(ss.ShardingError, match="not-expressible: reshard: DTensorSpec"):
        ss.run(g, np.zeros((10, 3), np.float32), mesh=mesh)
