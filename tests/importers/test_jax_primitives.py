"""ss.from_jax: jaxprs' primitives as registry ops, run sharded on simshard's devices, checked
bit for bit against numpy and against JAX's own output (bitwise where the arithmetic is exact)."""

import numpy as np
import pytest

import simshard as ss
from simshard.importers import UnsupportedOpError


def ints(shape, seed=0, lo=-4, hi=5):
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(np.float32)


def gaussian(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


MESH = ss.Mesh({"x": 2, "y": 4})


def run(f, *args, **kw):
    kw.setdefault("mesh", MESH)
    kw.setdefault("in_shardings", ss.P("x"))
    res = ss.run(ss.from_jax(f, **kw), *args, backend="local")
    assert res.verify.ok, res.verify.render()
    assert res.verify.framework, "the run was not compared with JAX's own output"
    return res


def test_exact_program_is_bitwise_against_jax_and_keeps_jit_shardings(jax):
    jnp = jax.numpy
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    @jax.jit
    def f(x, w):
        h = jnp.maximum(x @ w, 0.0)
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("x", "y")))
        return h.sum(axis=0), jnp.concatenate([h[:, ::-1], -h], axis=1).T, jnp.argmax(h, axis=1)

    g = jax.jit(f.__wrapped__, in_shardings=(NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, "y"))))
    x, w = ints((8, 16)), ints((16, 8), 1)
    imported = ss.from_jax(g)
    program = imported.trace(x, w)
    assert program.in_shardings[0].dims[0].axes[0].name == "x" and not program.in_shardings[0].dims[1].axes
    assert any(e.op == "sharding_constraint" for e in program.eqns)
    res = run(g, x, w, in_shardings=None, mesh=None)
    assert all(c.exact and c.check.bitwise for c in res.verify.framework)
    assert "bitwise required: exact arithmetic" in res.verify.render()


def test_float_program_within_ulps_of_jax_said_so(jax):
    jnp = jax.numpy

    def f(x):
        y = jax.nn.gelu(jnp.tanh(x) * 3.0) + jax.nn.sigmoid(x) - jnp.exp2(x) / 7
        return jax.nn.log_softmax(y, axis=-1), jnp.sqrt(jnp.abs(x)) ** 3, jax.lax.cumsum(x, axis=1, reverse=True)

    res = run(f, gaussian((8, 16)))
    assert not any(c.exact for c in res.verify.framework)
    assert all(c.ok for c in res.verify.framework)
    assert "ULP of scale allowed" in res.verify.render()


@pytest.mark.parametrize("case", ["int_div", "rem", "select_n", "sort_pairs", "pad", "take", "dynamic", "clamp",
                                  "iota", "split_reshape", "reduce_minmax"])
def test_primitive_family_matches_jax(jax, case):
    jnp, lax = jax.numpy, jax.lax
    x = ints((8, 12), 3, -9, 10)
    cases = {
        "int_div": lambda x: (x.astype(jnp.int32) // 3, lax.div(x.astype(jnp.int32), 4), lax.rem(x.astype(jnp.int32), 4)),
        "rem": lambda x: lax.rem(x, 4.0),
        "select_n": lambda x: (jnp.where(x > 0, x, -x), lax.select_n((x > 2).astype(jnp.int32) + (x > 5), x, 2 * x, 3 * x)),
        "sort_pairs": lambda x: (jnp.sort(x, axis=0), jnp.argsort(x, axis=1, stable=True)),
        "pad": lambda x: (jnp.pad(x, ((1, 2), (0, 3))), lax.pad(x, 0.0, ((-1, 2, 0), (1, -2, 0)))),
        "take": lambda x: (x[jnp.array([3, 1, 1, 7])], jnp.take(x, jnp.array([0, 5, 11]), axis=1)),
        "dynamic": lambda x: lax.dynamic_update_slice(x, lax.dynamic_slice(x, (2, 3), (2, 4)) * 2, (5, 1)),
        "clamp": lambda x: (jnp.clip(x, -2.0, 3.0), x ** 3, x ** 2),
        "iota": lambda x: x + lax.broadcasted_iota(jnp.float32, x.shape, 1),
        "split_reshape": lambda x: [p.reshape(-1, 2).T for p in jnp.split(x, 3, axis=1)],
        "reduce_minmax": lambda x: (x.max(axis=1), x.min(axis=0), jnp.prod(x[:, :3], axis=1), (x > 0).any(axis=0),
                                    (x > -9).all(axis=1)),
    }
    res = run(cases[case], x)
    assert all(c.check.bitwise for c in res.verify.framework), res.verify.render()


def test_unmapped_primitive_names_it_and_the_users_line(jax):
    jnp = jax.numpy

    def f(x):
        return jnp.cbrt(x)  # no simshard op

    with pytest.raises(UnsupportedOpError, match=r"JAX op 'cbrt'.*test_jax_primitives.py:\d+"):
        ss.from_jax(f).trace(ints((4, 4)))


def test_a_wrong_translation_fails_the_framework_check(jax, monkeypatch):
    """The comparison with JAX can fail: a table entry binding the wrong op (tanh as sin) runs and
    verifies against numpy (its own program), but not against JAX."""
    from simshard.importers import jax_primitives

    monkeypatch.setitem(jax_primitives.PRIMITIVES, "tanh", lambda eqn, x: ss.ops.get_op("sin")(x))
    res = ss.run(ss.from_jax(lambda x: jax.numpy.tanh(x) * 2.0, mesh=MESH, in_shardings=ss.P("x")), gaussian((8, 4)),
                 backend="local")
    assert res.verify.bitwise and not res.verify.ok
    assert not res.verify.framework[0].ok and "DIFFERS" in res.verify.render()


def test_imported_function_inside_ss_jit_and_grad(jax):
    jnp = jax.numpy
    imported = ss.from_jax(lambda x, w: jnp.sum(jnp.maximum(x @ w, 0.0) ** 2))
    x, w = ints((8, 4)), ints((4, 4), 1)
    both = ss.jit(lambda x, w: ss.grad(imported, argnums=1)(x, w) * 2.0, mesh=MESH, in_shardings=(ss.P("x"), None))
    expected = np.asarray(jax.grad(lambda w: jnp.sum(jnp.maximum(x @ w, 0.0) ** 2))(w)) * 2.0
    np.testing.assert_array_equal(both(x, w), expected)  # integer-valued: exact
    res = ss.run(both, x, w, backend="local")
    assert res.verify.ok


def test_simshard_run_file(jax, capsys):
    from pathlib import Path

    from simshard.cli import main

    example = Path(__file__).parent.parent.parent / "docs" / "examples" / "jax_transformer.py"
    assert main(["run", str(example), "--backend", "local"]) == 0
    out = capsys.readouterr().out
    assert "vs jax" in out and "ULP of scale allowed): ok" in out


def test_compositions_and_convolution(jax):
    jnp, lax = jax.numpy, jax.lax

    def f(x, w):
        t = jnp.tanh(x)
        trig = jnp.sinh(t) + jnp.cosh(t) + jnp.arctan(x) + jnp.arcsin(t * 0.5) + jnp.arccos(t * 0.5)
        special = jax.scipy.special.erfc(x) + jax.scipy.special.erf(x)
        y = lax.conv_general_dilated(x[None, :, :, None], w, (1, 1), ((1, 1), (0, 0)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return trig, special, y

    x, w = gaussian((8, 6)), gaussian((3, 1, 1, 4), 1)
    res = run(f, x, w, in_shardings=(ss.P("x"), None))
    assert any(e.op == "conv2d" for e in res.program.eqns)
    assert all(c.ok for c in res.verify.framework)


def test_embedding_lookup_and_its_gradient(jax):
    """gather (emb[ids]) and scatter-add (its transpose, in the gradient) as take and a one-hot contraction."""
    jnp = jax.numpy

    def loss(emb, ids, y):
        return jnp.sum(emb[ids] * y)

    step = jax.value_and_grad(loss)
    emb, ids, y = ints((10, 4)), np.array([1, 3, 3, 7, 0, 9, 3, 1], np.int32), ints((8, 4), 1)
    res = run(step, emb, ids, y, in_shardings=(None, ss.P("x"), ss.P("x")))
    assert {"take", "dot_general"} <= {e.op for e in res.program.eqns}
    assert all(c.check.bitwise for c in res.verify.framework)
