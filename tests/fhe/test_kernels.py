"""simshard/fhe/kernels.py: the diagonal method and baby-step giant-step on one block."""

import pytest

from simshard.fhe.kernels import best_plan, bsgs, diagonal
from simshard.fhe.params import CKKS

N2K = CKKS(2048)


def test_a_block_that_fills_its_ciphertext_rolls_with_two_rotations():
    p = diagonal(16, 16, copied=False, ckks=N2K)
    c = p.cost
    # 16 rolls (the zero roll counted) of two masked rotations, then 16 diagonal multiplies
    assert (c.rotations, c.pt_mults, c.rescales, c.levels) == (32, 16 * 2 + 16, 16 + 1, 2)
    assert p.formula() == "16*2"


def test_a_copy_makes_each_roll_one_rotation():
    p = diagonal(8, 8, copied=True, ckks=N2K)
    c = p.cost
    assert (c.rotations, c.pt_mults, c.rescales, c.levels) == (1 + 8, 8, 1, 1)
    assert p.formula() == "1+8"


def test_without_the_zero_roll():
    ckks = CKKS(2048, count_zero_roll=False)
    assert diagonal(16, 16, False, ckks).cost.rotations == 15 * 2
    assert diagonal(8, 8, True, ckks).cost.rotations == 1 + 7


def test_bsgs_giant_rolls_are_masked():
    p = bsgs(256, 256, copied=True, baby=16, ckks=CKKS(65536))
    c = p.cost
    assert (c.rotations, c.levels, c.pt_mults) == (1 + 16 + 16 * 2, 2, 256 + 32)
    assert p.formula() == "1+16+16*2"


def test_best_plan_takes_bsgs_where_it_pays():
    ckks = CKKS(65536)
    assert best_plan(8, 8, 512, 1024, N2K).method == "diagonal"  # bsgs 4x2 ties at 9, one level more
    p = best_plan(256, 256, 16384, 32768, ckks)
    assert p.method == "bsgs" and p.cost.rotations == 49 and p.cost.levels == 2
    assert (p.baby, p.giant) == (32, 8)  # ties 16x16 at 49 rotations, with fewer mask multiplies


def test_the_level_budget_keeps_bsgs_off_a_block_without_a_copy():
    # 512 diagonals filling the ciphertext: bsgs would need three levels
    assert best_plan(512, 512, 32768, 32768, CKKS(65536)).cost.rotations == 1024
    p = best_plan(512, 512, 32768, 32768, CKKS(65536, level_budget=3))
    assert p.method == "bsgs" and p.cost.levels == 3 and p.cost.rotations == 2 * (16 + 32)


def test_rectangular_blocks_tile_and_fold():
    tall = diagonal(4, 16, copied=False, ckks=N2K)  # 4 input channels tiled 4 times
    assert [s.name for s in tall.steps][:1] == ["copy input"] and tall.cost.rotations == 2 + 4 * 2
    wide = diagonal(16, 4, copied=False, ckks=N2K)  # 4 diagonals of length 16, folded 4 -> 1
    assert wide.cost.rotations == 4 * 2 + 2


def test_a_budget_too_small_is_reported():
    with pytest.raises(ValueError, match="level budget"):
        best_plan(16, 16, 1024, 1024, CKKS(2048, level_budget=1))
