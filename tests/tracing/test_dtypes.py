"""Dtypes as numpy 2 gives them: Python scalar arguments are weakly typed (NEP 50), and the
``dtype=`` of a reduction is honoured. Checked sharded, against numpy, bit for bit."""

import numpy as np
import pytest

import simshard as ss

MESH = ss.Mesh({"x": 2})
A = np.arange(16, dtype=np.float32).reshape(4, 4) * 9


def run(f, *args, shardings=None):
    shardings = shardings or (ss.P("x", None),) + (None,) * (len(args) - 1)
    res = ss.run(f, *args, mesh=MESH, in_shardings=shardings, backend="local")
    assert res.verify.bitwise
    out = res.outputs
    expected = f(*args)
    assert np.asarray(out).dtype == np.asarray(expected).dtype
    return out


@pytest.mark.parametrize("scalar", [3.0, 3, True, 2.5j, 7], ids=repr)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float16])
def test_a_python_scalar_argument_is_weakly_typed(scalar, dtype):
    a = (A % 7).astype(dtype)
    run(lambda a, s: a * s + s, a, scalar)


def test_numpy_scalars_and_arrays_stay_strong():
    run(lambda a, s: a * s, A, np.float64(3.0))
    run(lambda a, s: a * s, A, np.asarray(3.0))


def test_weak_with_weak_stays_weak():
    run(lambda a, s: a * (s * 2.0), A, 1.5)
    run(lambda a, s: a * (s * 2.0), A.astype(np.int32), 1.5)


@pytest.mark.parametrize("f", [
    lambda a: a.sum(axis=0, dtype=np.int8),
    lambda a: np.sum(a, dtype=np.int16),
    lambda a: a.prod(axis=1, dtype=np.float64),
    lambda a: a.mean(axis=0, dtype=np.float64),
    lambda a: np.cumsum(a, axis=0, dtype=np.int8),
    lambda a: np.cumsum(a.astype(np.uint8), axis=1),
    lambda a: a.astype(np.int8).sum(0),
    lambda a: (a > 3).sum(0),
    lambda a: a.astype(np.int16).prod(0, dtype=np.int16),
], ids=["sum-int8", "sum-all-int16", "prod-f64", "mean-f64", "cumsum-int8", "cumsum-uint8", "int8-sum",
        "bool-sum", "prod-int16"])
def test_reduction_dtype_is_honoured(f):
    run(f, A)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_low_precision_matmul_gives_numpys_dtype(dtype):
    """numpy's matmul multiplies ml_dtypes' bfloat16 and float8 into float32: so does the traced one."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dt = getattr(ml_dtypes, dtype)
    a = (np.arange(24).reshape(4, 6) % 5).astype(dt)
    b = (np.arange(24).reshape(6, 4) % 3).astype(dt)
    for shardings in ((ss.P("x", None), None), (ss.P(None, "x"), ss.P("x", None))):
        run(lambda a, b: a @ b, a, b, shardings=shardings)
