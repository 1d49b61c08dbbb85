"""Eager sharded arrays (issue 27): ``ss.device_put`` commits an array to a mesh's devices; its
type, its ops and ``ss.reshard`` / ``ss.jit`` on it follow the same rules as under ``ss.jit``."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simshard as ss
import simshard.numpy as jnp
from simshard import AxisType, NamedSharding, P
from simshard.runtime.eager import Array, host_of, use_devices
from simshard.runtime.eager.call import call as eager_call
from simshard.runtime.local.mesh import LocalMesh
from simshard.tracing.explicit import ShardingTypeError

E = ss.make_mesh((2, 4), ("X", "Y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
A = ss.make_mesh((2, 4), ("X", "Y"))  # Auto axes


def ints(shape, dtype=np.float32, seed=0):
    """Small integers (exact in float: a sharded sum reordered gives the same bits)."""
    return np.random.default_rng(seed).integers(-3, 4, size=shape).astype(dtype)


def put(x, *spec, mesh=E):
    return ss.device_put(x, NamedSharding(mesh, P(*spec)))


def test_device_put_commits_shards_and_types():
    x = ints((8, 16))
    a = put(x, "X", None)
    assert isinstance(a, Array)
    assert str(ss.typeof(a)) == "float32[8@X,16]"
    assert a.sharding.spec == P("X", None)
    assert a.shard(0).shape == (4, 16) and a.shard(7).shape == (4, 16)
    np.testing.assert_array_equal(a.shard(4), x[4:])  # device 4 is X=1
    np.testing.assert_array_equal(np.asarray(a), x)


def test_bare_partition_spec_under_set_mesh_and_error_without():
    with ss.set_mesh(E):
        a = ss.device_put(ints((8, 16)), P(None, "Y"))
        assert str(ss.typeof(a)) == "float32[8,16@Y]"
    with pytest.raises(ValueError, match="not under a mesh context"):
        ss.device_put(ints((8, 16)), P("X"))


def test_eager_add_types_and_values_as_jax():
    a = put(np.arange(16, dtype=np.int32).reshape(4, 4), "X", None)
    b = put(np.arange(16, dtype=np.int32).reshape(4, 4), None, "Y")
    c = a + b
    assert str(ss.typeof(c)) == "int32[4@X,4@Y]" and c.sharding.spec == P("X", "Y")
    np.testing.assert_array_equal(np.asarray(c), 2 * np.arange(16).reshape(4, 4))
    assert c.dtype == np.int32


def test_eager_matmul_sum_methods_and_scalars():
    x, w = ints((8, 16)), ints((16, 4), seed=1)
    a, b = put(x, "X", None), put(w, None, "Y")
    y = a @ b
    assert str(ss.typeof(y)) == "float32[8@X,4@Y]"
    np.testing.assert_array_equal(np.asarray(y), x @ w)
    s = jnp.sum(y)
    assert str(ss.typeof(s)) == "float32[]" and float(s) == float((x @ w).sum())
    assert str(ss.typeof(y.sum(axis=0))) == "float32[4@Y]"
    assert str(ss.typeof(a.T)) == "float32[16,8@X]"
    assert str(ss.typeof(a * 2)) == "float32[8@X,16]"
    np.testing.assert_array_equal(np.asarray(a * 2 - 1), x * 2 - 1)
    np.testing.assert_array_equal(np.asarray(np.tanh(a)), np.tanh(x))
    np.testing.assert_array_equal(np.asarray(a[4:]), x[4:])


def test_eager_errors_are_the_traced_ones():
    a = put(ints((8, 16)), None, "X")
    b = put(ints((16, 4)), "Y", None)
    with pytest.raises(ShardingTypeError, match="contracting dimensions"):
        a @ b
    with pytest.raises(ShardingTypeError, match="Contracting dimensions are sharded"):
        a @ put(ints((16, 4)), "X", None)


def test_eager_reshard_moves_on_devices_and_takes_numpy():
    x = ints((8, 16))
    a = put(x, "X", None)
    r = ss.reshard(a, P(None, ("X", "Y")))
    assert str(ss.typeof(r)) == "float32[8,16@(X,Y)]"
    np.testing.assert_array_equal(np.asarray(r), x)
    assert r.shard(1).shape == (8, 2)
    with ss.set_mesh(E):
        n = ss.reshard(np.arange(8).reshape(4, 2), P("X", None))
    assert str(ss.typeof(n)) == "int32[4@X,2]"  # JAX's dtype: 64-bit types off


def test_jit_on_committed_arrays_takes_their_types():
    seen = []

    @ss.jit
    def f(x, y):
        seen.append((str(ss.typeof(x)), str(ss.typeof(y))))
        return x + y

    a = put(np.arange(4, dtype=np.int32).reshape(4, 1), "X", None)
    b = put(np.arange(8, dtype=np.int32).reshape(1, 8), None, "Y")
    out = f(a, b)
    assert seen == [("int32[4@X,1]", "int32[1,8@Y]")]
    assert isinstance(out, Array) and str(ss.typeof(out)) == "int32[4@X,8@Y]"
    np.testing.assert_array_equal(np.asarray(out), np.arange(4).reshape(4, 1) + np.arange(8).reshape(1, 8))


def test_compiled_once_per_op_and_types():
    from simshard.runtime.eager.call import _CACHE

    a = put(ints((8, 16)), "X", None)
    b = put(ints((8, 16), seed=2), "X", None)
    a + b
    n = len(_CACHE[a.host])
    a + b
    b + a
    assert len(_CACHE[a.host]) == n  # same op, same types: the compiled op is reused
    a + put(ints((8, 16)), None, "Y")
    assert len(_CACHE[a.host]) == n + 1


def test_auto_mesh_arrays_propagate():
    x = ints((8, 16))
    a = put(x, "X", None, mesh=A)
    assert str(ss.typeof(a)) == "float32[8,16]"  # Auto axes are not in the type
    y = a * 3
    assert y.sharding.spec == P("X", None)
    np.testing.assert_array_equal(np.asarray(y), x * 3)


def test_arrays_on_two_device_sets_are_refused():
    other = LocalMesh(E)
    a = put(ints((8, 16)), "X", None)
    with use_devices(other):
        b = put(ints((8, 16)), "X", None)
    assert b.host is other and a.host is host_of(E)
    with pytest.raises(ValueError, match="incompatible devices"):
        a + b


def test_arrays_are_immutable():
    a = put(ints((8, 16)), "X", None)
    with pytest.raises(TypeError, match="immutable"):
        a[0] = 1
    with pytest.raises(TypeError, match="immutable"):
        np.add(a, a, out=np.empty((8, 16), np.float32))


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([("X", None), (None, "Y"), ("Y", "X"), (None, None)]),
       st.sampled_from([("X", None), (None, "Y"), (None, None)]), st.integers(0, 100))
def test_eager_elementwise_matches_traced_types(spec_a, spec_b, seed):
    """An eager op's type is the type ss.jit gives the same op on the same types."""
    x, y = ints((8, 8), seed=seed), ints((8, 8), seed=seed + 1)
    a, b = put(x, *spec_a), put(y, *spec_b)
    traced = []
    try:
        ss.jit(lambda u, v: traced.append(str(ss.typeof(u * v))))(a, b)
    except ShardingTypeError as e:
        with pytest.raises(ShardingTypeError, match=str(e).split(".")[0][:30]):
            a * b
        return
    got = a * b
    assert str(ss.typeof(got)) == traced[0]
    np.testing.assert_array_equal(np.asarray(got), x * y)


def test_eager_call_is_usable_directly():
    a = put(ints((8, 16)), "X", None)
    out = eager_call(lambda x, k: x * k, (a, 3.0), {}, wrap=Array)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a) * 3)


def test_numpy_operands_are_replicated_and_uneven_explicit_inputs_refused():
    x = ints((8, 16))
    a = put(x, "X", None)
    y = a + np.ones((8, 16), np.float32)
    assert str(ss.typeof(y)) == "float32[8@X,16]"
    np.testing.assert_array_equal(np.asarray(y), x + 1)
    uneven = put(ints((6, 4)), "Y", None)  # 6 rows over Y=4: JAX commits it, and refuses it at a jit boundary
    with pytest.raises(ValueError, match="does not evenly divide the dimension size 6"):
        uneven * 2


def test_a_ray_mesh_set_with_use_devices_runs_the_eager_ops(ray_session):
    """The one Ray test: device_put onto a RayMesh and an eager op on its device processes."""
    pytest.importorskip("ray")
    from simshard.runtime.ray.driver.mesh import RayMesh

    with RayMesh(E, devices_per_process=4) as rm, use_devices(rm):
        x = ints((8, 16))
        a = put(x, "X", None)
        assert a.host is rm
        y = a * 2 + 1
        assert str(ss.typeof(y)) == "float32[8@X,16]"
        np.testing.assert_array_equal(np.asarray(y), x * 2 + 1)


def test_an_array_met_inside_a_trace_is_a_constant_of_it():
    x = ints((8, 16))
    a = put(x, "X", None)
    f = ss.jit(lambda t: a + t)  # a closed over: its value, as JAX embeds a constant
    np.testing.assert_array_equal(np.asarray(f(np.ones((8, 16), np.float32))), x + 1)
    g = ss.jit(lambda t: np.add(a, t))
    np.testing.assert_array_equal(np.asarray(g(np.ones((8, 16), np.float32))), x + 1)


def test_simshard_numpy_out_sharding_outside_a_trace_commits_the_result():
    """``jnp.zeros((8, 4), out_sharding=P("X"))`` under an explicit mesh: ``float32[8@X,4]`` on the devices."""
    with ss.set_mesh(E):
        z = jnp.zeros((8, 4), out_sharding=P("X"))
        r = jnp.arange(8, out_sharding=P("Y"))
    assert isinstance(z, Array) and str(ss.typeof(z)) == "float32[8@X,4]"
    assert str(ss.typeof(r)) == "int32[8@Y]" and r.tolist() == list(range(8))
    b = put(np.arange(16, dtype=np.float32).reshape(4, 4), None, "Y")
    m = jnp.matmul(put(np.eye(4, dtype=np.float32), "X", None), b, out_sharding=P("X", None))
    assert str(ss.typeof(m)) == "float32[4@X,4]"
    np.testing.assert_array_equal(np.asarray(m), np.asarray(b))


def test_lax_functions_and_control_flow_run_eagerly_on_committed_arrays():
    import simshard.lax as lax

    x = ints((8, 16))
    a = put(x, "X", None)
    y = lax.cond(jnp.sum(a) > 0, lambda t: t * 2, lambda t: t - 1, a)
    assert str(ss.typeof(y)) == "float32[8@X,16]"
    np.testing.assert_array_equal(np.asarray(y), x * 2 if x.sum() > 0 else x - 1)
    t = lax.transpose(a, (1, 0))
    assert str(ss.typeof(t)) == "float32[16,8@X]"
    xs = put(x, None, "Y")  # scanned over its unsharded dim (a sharded one is the compiler half of issue 27)
    c, ys = lax.scan(lambda c, r: (c + r, r.sum()), put(np.zeros(16, np.float32), "Y"), xs)
    assert (str(ss.typeof(c)), str(ss.typeof(ys))) == ("float32[16@Y]", "float32[8]")
    np.testing.assert_array_equal(np.asarray(c), x.sum(0))
    np.testing.assert_array_equal(np.asarray(ys), x.sum(1))


def test_functional_updates_grad_and_vmap_on_committed_arrays():
    x = ints((8, 2))
    a = put(x, "X", None)
    with pytest.raises(ShardingTypeError):  # as JAX: an update into a sharded dim needs its out_sharding
        a.at[0].set(5.0)
    b = put(x, None, None).at[0].set(5.0).at[1, 1].add(2.0)
    assert str(ss.typeof(b)) == "float32[8,2]"
    want = x.copy()
    want[0], want[1, 1] = 5.0, want[1, 1] + 2.0
    np.testing.assert_array_equal(np.asarray(b), want)
    g = ss.grad(lambda t: (t * t).sum())(a)
    assert isinstance(g, Array) and str(ss.typeof(g)) == "float32[8@X,2]"
    np.testing.assert_array_equal(np.asarray(g), 2 * x)
    v = ss.vmap(lambda row: row * 3)(a)
    np.testing.assert_array_equal(np.asarray(v), 3 * x)


def test_the_cache_keeps_the_latest_ops_and_unloads_the_dropped(monkeypatch):
    from simshard.runtime.eager import call as eager_module

    host = LocalMesh(E)
    unloaded = []
    host.unload = unloaded.append
    monkeypatch.setattr(eager_module, "CACHE_SIZE", 2)
    with use_devices(host):
        a = put(ints((8, 16)), "X", None)
    for k in (1.0, 2.0, 3.0):
        a * k
    assert len(eager_module._CACHE[host]) == 2 and len(unloaded) == 1
