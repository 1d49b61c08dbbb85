"""``simshard.numpy`` gives jax.numpy's dtypes with x64 off (issue 27), traced and eager, while
numpy's own functions and operators on traced values keep numpy's (docs/dtypes.md)."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
import simshard.numpy as snp
from simshard.dtypes import jax_result_type

I32 = np.arange(4, dtype=np.int32)


def traced(f, *args) -> list[str]:
    p = ss.jit(f).trace(*args)
    return [str(o.aval.dtype) for o in p.outputs]


@pytest.mark.parametrize("f, args, want", [
    (lambda: snp.arange(8), (), "int32"),
    (lambda: snp.sin(snp.arange(4)), (), "float32"),
    (lambda x: snp.add(x, 1.5), (I32,), "float32"),
    (lambda x: snp.multiply(x, 2), (I32.astype(np.int8),), "int8"),
    (lambda x: snp.add(x, 1.0), (I32.astype(np.float16),), "float16"),
    (lambda x, y: snp.add(x, y), (I32, I32.astype(np.float32)), "float32"),
    (lambda x, y: snp.add(x, y), (I32.astype(np.uint32), I32), "int32"),
    (lambda x, y: snp.add(x, y), (I32.astype(np.int8), I32.astype(np.uint8)), "int16"),
    (lambda x: snp.add(x, np.ones(4)), (I32.astype(np.float32),), "float32"),
    (lambda x: snp.divide(x, x + 1), (I32,), "float32"),
    (lambda x: snp.sqrt(x), (I32,), "float32"),
    (lambda x: snp.floor(x), (I32,), "int32"),
    (lambda x: snp.mean(x), (I32,), "float32"),
    (lambda x: snp.where(x > 1, x, 0.5), (I32,), "float32"),
    (lambda x: snp.matmul(x, np.ones((4, 2))), (I32,), "float32"),
    (lambda x: snp.concatenate([x, x.astype(np.float32)]), (I32,), "float32"),
    (lambda x: snp.less(x, 1.5), (I32,), "bool"),
], ids=lambda v: "" if callable(v) or isinstance(v, tuple) else v)
def test_snp_follows_jax_dtypes_traced_and_eager(f, args, want):
    assert traced(f, *args) == [want]
    assert str(np.asarray(f(*args)).dtype) == want


def test_numpy_functions_and_operators_keep_numpys_rules():
    assert traced(lambda x: (np.sin(x), x + 1.5, x / x), I32) == ["float64", "float64", "float64"]


def test_the_lattice():
    assert jax_result_type(True) == np.bool_ and jax_result_type(1) == np.int32 and jax_result_type(1.0, True) == np.float32
    assert jax_result_type(np.float32(1), 1j) == np.complex64 and jax_result_type(np.ones(2)) == np.float32
    assert jax_result_type(np.int32(1), np.float16(1)) == np.float16  # ints sit below every float
