"""Per-device tables (simshard/sharding/rows.py): distinct rows as np.unique finds them, and the
row of each device."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from simshard.sharding.rows import FEW_KEYS, distinct_columns, distinct_rows, row_of, rows_of


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_distinct_rows_are_np_uniques(data):
    bound = data.draw(st.sampled_from([3, 2**40]), label="bound")  # one mixed-radix number, or too wide for one
    table = data.draw(hnp.arrays(np.int64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=12),
                                 elements=st.integers(-bound, bound)), label="table")
    rows, first, inverse = distinct_rows(table)
    want, want_first, want_inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    assert np.array_equal(rows, want) and np.array_equal(first, want_first)
    assert np.array_equal(inverse, want_inverse.reshape(-1))
    assert np.array_equal(rows[inverse], table)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_distinct_columns_are_np_uniques_with_few_keys_or_many(data):
    """Column by column, as ``distinct_rows`` gives them: where the possible keys are no more than
    the rows, each key's first row found by a pass per key (up to ``FEW_KEYS`` distinct) or by
    ``minimum.at`` (more), else by a sort."""
    n = data.draw(st.integers(1, 300), label="rows")
    spans = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=3), label="spans")
    columns = [data.draw(hnp.arrays(np.int64, n, elements=st.integers(-5, -5 + k - 1)), label=f"column {j}")
               for j, k in enumerate(spans)]
    first, inverse = distinct_columns(columns)
    table = np.stack(columns, axis=1)
    _, want_first, want_inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    assert np.array_equal(first, want_first) and np.array_equal(inverse, want_inverse.reshape(-1))


def test_the_first_rows_of_many_distinct_keys_and_of_few_agree():
    key = np.arange(400) % 50  # 50 distinct keys over 400 rows: minimum.at; then 10: a pass per key
    for column in (key, key % 10):
        first, inverse = distinct_columns([column])
        assert first.tolist() == list(range(int(column.max()) + 1)) and np.array_equal(inverse, column)
    assert 10 <= FEW_KEYS < 50


def test_columns_too_wide_for_one_number_still_sort():
    table = np.array([[2**62, 0], [0, 2**62], [2**62, 0]])
    rows, first, inverse = distinct_rows(table)
    assert rows.tolist() == [[0, 2**62], [2**62, 0]] and first.tolist() == [1, 0] and inverse.tolist() == [1, 0, 1]


def test_a_table_with_no_columns_is_one_row():
    rows, first, inverse = distinct_rows(np.zeros((5, 0), dtype=np.int64))
    assert rows.shape == (1, 0) and first.tolist() == [0] and inverse.tolist() == [0] * 5


def test_rows_of_devices():
    dense, sparse = np.arange(4), np.array([3, 7, 8, 20])
    assert rows_of(dense, [[2, 0]]).tolist() == [[2, 0]]
    assert rows_of(sparse, [8, 3]).tolist() == [2, 0]
    assert row_of(sparse, 20) == 3
    with pytest.raises(KeyError):
        row_of(sparse, 9)
    with pytest.raises(KeyError):
        row_of(dense, 4)
