"""VerifyReport (bit patterns, dtypes, shapes, first divergence, ULP) and exact_inputs."""

import json

import numpy as np
import pytest

import simshard as ss
from simshard.dtypes import bit_equal
from simshard.report import VerifyReport, compare, exact_inputs, exact_magnitude, ulp_distance


def test_bitwise_equal_passes():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = VerifyReport.compare([x, np.int8(3)], [x.copy(), np.int8(3)])
    assert r.bitwise and bool(r) and r.first_divergence is None
    assert "bitwise" in r.render()


def test_one_ulp_is_a_failure_with_its_distance_and_first_index():
    e = np.ones((3, 4), np.float32)
    a = e.copy()
    a[1, 2] = np.nextafter(np.float32(1), np.float32(2))
    a[2, 0] = np.nextafter(np.float32(1), np.float32(0))
    c = compare(a, e, "output 0", note="sum over y reassociated by %3 dot_general")
    assert not c.bitwise and c.problem == "values" and c.mismatches == 2
    assert c.first_index == (1, 2) and c.max_ulp == 1
    assert c.actual_value == pytest.approx(1 + 2**-23) and c.expected_value == 1.0
    text = c.describe()
    assert "2 of 12 elements differ; first at index (1, 2)" in text and "max 1 ULP" in text and "reassociated" in text
    r = VerifyReport((c,))
    assert not r.bitwise and r.max_ulp == 1 and r.first_divergence is c
    assert "DIFFERS (values)" in r.render()


def test_signed_zeros_count_and_nans_compare_by_class():
    assert not compare(np.float64(-0.0), np.float64(0.0)).bitwise
    assert compare(np.float64(-0.0), np.float64(0.0)).max_ulp == 1
    nan1 = np.array([np.nan], np.float32)
    nan2 = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert compare(nan2, nan1).bitwise  # a NaN's payload says how it was made, not what it is
    c = compare(nan1, np.array([1.0], np.float32))
    assert not c.bitwise and c.max_ulp is None  # no ULP distance to a NaN


def test_dtype_and_shape_mismatches():
    c = compare(np.zeros(3, np.float64), np.zeros(3, np.float32), "output 1")
    assert c.problem == "dtype" and "dtype float64 where the reference has float32" in c.describe()
    c = compare(np.zeros((3, 1)), np.zeros(3))
    assert c.problem == "shape" and "shape (3, 1) where the reference has (3,)" in c.describe()
    with pytest.raises(ValueError, match="2 outputs to compare with 1"):
        VerifyReport.compare([1, 2], [1])


def test_integers_and_json():
    c = compare(np.array([1, 5, 3]), np.array([1, 2, 3]))
    assert c.first_index == (1,) and c.actual_value == 5 and c.expected_value == 2 and c.max_ulp is None
    r = VerifyReport.compare([np.array([np.inf]), np.array([1, 5, 3])], [np.array([1.0]), np.array([1, 2, 3])])
    data = json.loads(r.to_json())
    assert data["bitwise"] is False and data["checks"][0]["actual_value"] == "inf"
    assert data["checks"][1]["first_index"] == [1]


def test_ulp_distance():
    one = np.float64(1.0)
    assert ulp_distance(one, np.float64(2.0)) == 2**52
    tiny = np.float32(1e-45)  # the smallest subnormal
    assert ulp_distance(-tiny, tiny) == 3  # -tiny, -0, +0, +tiny
    assert ulp_distance(np.array([1 + 1j], np.complex64), np.array([1 + 1j], np.complex64))[0] == 0
    assert ulp_distance(np.array([1, 2]), np.array([1, 3])) is None


def test_exact_inputs_shapes_and_determinism():
    a = exact_inputs((3, 4), seed=1)
    assert a.shape == (3, 4) and a.dtype == np.float32 and np.array_equal(a, np.round(a))
    assert np.array_equal(a, exact_inputs((3, 4), seed=1)) and not np.array_equal(a, exact_inputs((3, 4), seed=2))
    xs = exact_inputs([(2,), ss.ShapeDtype((2, 2), np.int32), np.zeros(3, bool), ss.Aval((1,), np.float64)])
    assert [x.dtype for x in xs] == [np.float32, np.int32, bool, np.float64]
    prog = ss.trace(lambda x, w: x @ w, ss.ShapeDtype((4, 8)), ss.ShapeDtype((8, 2), np.float16))
    x, w = exact_inputs(prog)
    assert x.shape == (4, 8) and w.dtype == np.float16
    with pytest.raises(TypeError, match="cannot read a shape"):
        exact_inputs(["nope"])


def test_exact_inputs_keep_every_sum_exact():
    # Any order of summation gives the same bits: float32 matmul = float64 matmul = blockwise sums.
    x, w = exact_inputs([(16, 512), (512, 8)], seed=4)
    ref = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    assert np.array_equal(x @ w, ref)
    blocks = [x[:, k : k + 64] @ w[k : k + 64] for k in range(0, 512, 64)]
    assert np.array_equal(sum(blocks[::-1]), ref) and np.array_equal(sum(blocks), ref)
    m = exact_magnitude(np.float32, 512 * 16)
    assert m >= 1 and 512 * 16 * m**2 < 2**24
    assert exact_magnitude(np.float16, 10**6) == 1


def test_against_a_program_run_whole():
    prog = ss.trace(lambda x, w: x @ w, ss.ShapeDtype((4, 8)), ss.ShapeDtype((8, 2)))
    x, w = exact_inputs(prog, seed=2)
    assert VerifyReport.against(prog, (x, w), [x @ w]).bitwise
    wrong = x @ w
    wrong[3, 1] += 1
    r = VerifyReport.against(prog, (x, w), [wrong])
    assert not r.bitwise and r.first_divergence.first_index == (3, 1) and r.checks[0].what == "output 0"


# -- what bits mean (simshard.dtypes.bit_equal; issue 11) ----------------------------------------
def _with_padding(x: np.ndarray, byte: int) -> np.ndarray:
    """A copy of long-double ``x`` with its padding bytes (past the 80 significant bits) set."""
    y = np.array(x, copy=True)
    raw = y.reshape(-1).view(np.uint8).reshape(y.size, y.itemsize)
    raw[:, 10:] = byte
    return y


def test_nans_compare_by_class_whatever_their_payload():
    quiet = np.array([np.nan], np.float32)
    other = np.array([0x7FC00123], np.uint32).view(np.float32)  # a NaN with another payload
    negative = -quiet
    assert bit_equal(quiet, other).all() and bit_equal(quiet, negative).all()
    assert not bit_equal(quiet, np.array([1.0], np.float32)).any()
    assert not bit_equal(np.array([0.0], np.float32), np.array([-0.0], np.float32)).any()  # zeros keep their sign
    check = compare(other, quiet)
    assert check.bitwise


def test_complex_nans_compare_by_class():
    a = np.array([complex(np.nan, 1.0)], np.complex64)
    b = np.array([complex(1.0, np.nan)], np.complex64)
    assert bit_equal(a, b).all()


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize != 16 or np.finfo(np.longdouble).nmant != 63,
                    reason="x87 80-bit long double in 16 bytes only")
def test_long_double_padding_bytes_do_not_count():
    x = np.arange(6, dtype=np.longdouble) / 3
    a, b = _with_padding(x, 0x00), _with_padding(x, 0xAB)
    assert a.tobytes() != b.tobytes()
    assert bit_equal(a, b).all()
    assert compare(a, b).bitwise
    res = ss.run(lambda v: v * 2, b, mesh=ss.Mesh({"x": 2}), in_shardings=(None,), backend="local")
    assert res.verify.bitwise  # replicas whose padding differs are the same value (no ReplicaMismatchError)
