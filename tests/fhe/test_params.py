"""simshard/fhe/params.py: CKKS parameter sets."""

import pytest

from simshard.fhe.params import CKKS, pow2_ceil


def test_slots_are_half_the_ring_degree():
    assert CKKS(2048).slots == 1024 and CKKS(65536).slots == 32768
    assert CKKS.with_slots(1024) == CKKS(2048)
    assert str(CKKS(65536)) == "N=64k, S=32k"


@pytest.mark.parametrize("kw, match", [({"ring_degree": 3000}, "power of two"),
                                       ({"ring_degree": 2048, "level_budget": 0}, "level budget")])
def test_bad_parameters_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        CKKS(**kw)


def test_pow2_ceil():
    assert [pow2_ceil(n) for n in (1, 2, 3, 49, 64, 65)] == [1, 2, 4, 64, 64, 128]
