"""simshard/fhe/ckks.py: the seed document's six rotation figures, computed by the cost model.

The seed counts, per ciphertext and in total: the 1x1 conv input[64,7,7] x kernel[16,64,1,1] with
N=2k: 16*2=32 and 128 on {1,4,1}, (8+1) and 144 on {2,8,1}; ResNet-50's input[2048,7,7] x
kernel[512,2048,1,1] with N=64k: 4*(512*2)=4096 on {1,4,1} and 16*(16+32)=768 on {2,8,1}. The
last is 16*(1+32+8*2)=784 here: the seed leaves out the copy its own (8+1) counts (docs/fhe.md).
"""

import pytest

import simshard as ss
from simshard.errors import ShardingError
from simshard.fhe.ckks import CipherMesh, ConvLayer, conv_cost
from simshard.fhe.params import CKKS

SEED = ConvLayer.from_shapes((64, 7, 7), (16, 64, 1, 1))
RESNET50 = ConvLayer.from_shapes((1, 2048, 7, 7), (512, 2048, 1, 1))


@pytest.mark.parametrize("layer, n, mesh, per_device, total, width", [
    (SEED, 2048, {"x": 1, "y": 4, "z": 1}, 32, 128, 1024),
    (SEED, 2048, {"x": 2, "y": 8, "z": 1}, 9, 144, 512),
    (RESNET50, 65536, {"x": 1, "y": 4, "z": 1}, 1024, 4096, 32768),
    (RESNET50, 65536, {"x": 2, "y": 8, "z": 1}, 49, 784, 16384),  # the seed: 48 and 768
])
def test_the_seeds_rotation_figures(layer, n, mesh, per_device, total, width):
    c = conv_cost(layer, mesh, CKKS(n))
    assert c.per_device.rotations == per_device
    assert c.total.rotations == total == c.devices * per_device
    assert c.input.width == width  # the seed's "512 slots", "32K slots", "16K slots"


def test_the_formulas_read_as_the_seeds():
    assert conv_cost(SEED, {"y": 4}, CKKS(2048)).formula() == "4*(16*2)"
    assert conv_cost(SEED, {"x": 2, "y": 8}, CKKS(2048)).formula() == "16*(1+8)"
    assert conv_cost(RESNET50, {"y": 4}, CKKS(65536)).formula() == "4*(512*2)"
    assert conv_cost(RESNET50, {"x": 2, "y": 8}, CKKS(65536)).formula() == "16*(1+32+8*2)"


def test_levels_multiplies_rescales_and_reduction():
    y4 = conv_cost(SEED, {"y": 4}, CKKS(2048))
    assert (y4.per_device.levels, y4.per_device.pt_mults, y4.per_device.rescales) == (2, 48, 17)
    assert y4.total.ct_adds == 3  # four partial outputs added across y
    x2y8 = conv_cost(SEED, {"x": 2, "y": 8}, CKKS(2048))
    assert (x2y8.per_device.levels, x2y8.per_device.pt_mults, x2y8.total.ct_adds) == (1, 8, 2 * 7)
    assert y4.utilization == pytest.approx(16 * 49 / 1024) and x2y8.utilization == pytest.approx(8 * 49 / 1024)


def test_the_seeds_ranking_of_the_resnet50_strategies():
    y4, x2y8 = (conv_cost(RESNET50, m, CKKS(65536)) for m in ({"y": 4}, {"x": 2, "y": 8}))
    assert x2y8.total.rotations < y4.total.rotations
    assert x2y8.utilization < y4.utilization  # utilisation-first would take y4


def test_no_sharding_of_the_input_is_replication():
    # the seed's "non-shard" case: input[16,7,7] on every ciphertext, output channels over x
    c = conv_cost(ConvLayer.from_shapes((16, 7, 7), (64, 16, 1, 1)), {"x": 4}, CKKS(2048))
    assert (c.block.channels_in, c.block.channels_out) == (16, 16) and c.total.ct_adds == 0
    assert c.per_device.rotations == 16 * 2


def test_a_matmul_is_a_1x1_conv():
    c = conv_cost(ConvLayer.matmul(rows=4, k=64, n=64), {"y": 2}, CKKS(2048))
    assert c.block.channels_in == 32 and c.input.width == 128 and c.plan.copied


def test_an_ss_mesh_is_accepted():
    assert CipherMesh.of(ss.Mesh({"x": 2, "y": 8, "z": 1})) == CipherMesh(2, 8, 1)


@pytest.mark.parametrize("mesh, match", [({"y": 3}, "y=3 does not divide the 64 input channels"),
                                         ({"w": 2}, "axes x, y, z"),
                                         ({"y": 1}, "more than the 1024"),
                                         ({"x": 0}, "positive size")])
def test_bad_meshes_are_reported(mesh, match):
    with pytest.raises(ShardingError, match=match):
        conv_cost(SEED, mesh, CKKS(2048))


@pytest.mark.parametrize("k", [3, 7])
def test_kxk_kernels_are_priced_like_1x1_once_per_tap(k):
    """Issue 27 (seed 003): every (diagonal, tap) pair is one roll of the input, so a k x k kernel
    is the 1x1 kernel's rolls and multiplies times k*k at the same depth (the seed counts a 7x7
    kernel's taps as 7*7=49 rotations)."""
    layer = ConvLayer.from_shapes((64, 7, 7), (16, 64, k, k))
    full = conv_cost(layer, {"y": 4}, CKKS(2048))  # 16 diagonals, no room for a copy: 2-rotation rolls
    one = conv_cost(ConvLayer.from_shapes((64, 7, 7), (16, 64, 1, 1)), {"y": 4}, CKKS(2048))
    assert full.per_device.rotations == k * k * one.per_device.rotations == k * k * 16 * 2
    assert full.per_device.levels == one.per_device.levels == 2
    assert full.formula() == f"4*({k * k}*16*2)" and full.total.rotations == 4 * k * k * 32
    half = conv_cost(layer, {"x": 2, "y": 8}, CKKS(2048))  # room for a copy: baby rolls of one rotation
    assert half.plan.copied and half.total.rotations < full.total.rotations
    assert conv_cost(ConvLayer.from_shapes((64, 7, 7), (16, 64, 7, 7)), {"y": 4}, CKKS(2048, count_zero_roll=False)
                     ).per_device.rotations == (49 * 16 - 1) * 2


def test_kxk_kernels_on_split_rows_need_a_halo_that_is_not_priced():
    with pytest.raises(ShardingError, match="halo"):
        conv_cost(ConvLayer.from_shapes((16, 28, 28), (16, 16, 3, 3)), {"z": 4}, CKKS(8192))
