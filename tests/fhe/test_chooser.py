"""simshard/fhe/chooser.py: picking a layer's ciphertext mesh given N (and so the slots)."""

import pytest

from simshard.errors import ShardingError
from simshard.fhe import CKKS, CipherMesh, ConvLayer, choose_mesh, rank_meshes

SEED = ConvLayer.from_shapes((64, 7, 7), (16, 64, 1, 1))
RESNET50 = ConvLayer.from_shapes((2048, 7, 7), (512, 2048, 1, 1))


@pytest.mark.parametrize("layer, n, rotations", [(SEED, 2048, 128), (RESNET50, 65536, 4096)])
def test_utilization_first_fills_the_ciphertexts(layer, n, rotations):
    """The seed's utilisation-first strategy: the fewest input ciphertexts, here {1,4,1}, and the
    two-rotation rolls that come with full blocks."""
    c = choose_mesh(layer, CKKS(n), policy="utilization", split_rows=True)
    assert c.mesh == CipherMesh(1, 4, 1) and c.input.width == CKKS(n).slots
    assert c.total.rotations == rotations and not c.plan.copied


def test_fewest_rotations_over_channel_meshes_is_the_seeds_resnet50_choice():
    c = choose_mesh(RESNET50, CKKS(65536), policy="rotations", split_rows=False)
    assert c.mesh == CipherMesh(2, 8, 1) and c.total.rotations == 784 and c.plan.copied


def test_splitting_rows_of_a_1x1_conv_needs_fewer_rotations_still():
    # each of 7 ciphertexts holds every channel of one row (8 slots per channel): 2048 x 512 by BSGS
    c = choose_mesh(RESNET50, CKKS(65536), policy="rotations", split_rows=True)
    assert c.mesh == CipherMesh(1, 1, 7) and c.total.rotations == 7 * (1 + 32 + 16 * 2 + 2)


def test_every_ranked_mesh_fits_and_the_bound_holds():
    ranked = rank_meshes(SEED, CKKS(2048), max_ciphertexts=8)
    assert ranked and all(c.devices <= 8 and c.input.fits for c in ranked)
    assert [c.total.rotations for c in rank_meshes(SEED, CKKS(2048), "rotations", split_rows=True)][:2] == [105, 128]


@pytest.mark.parametrize("layer, n, mesh, rotations, beaten", [
    (SEED, 2048, CipherMesh(1, 4, 1), 128, (CipherMesh(2, 8, 1), 144)),
    (RESNET50, 65536, CipherMesh(2, 8, 1), 784, (CipherMesh(1, 4, 1), 4096)),
])
def test_the_default_chooser_follows_the_seeds_ranking(layer, n, mesh, rotations, beaten):
    """Issue 27 (seed 003): by default the strategy with fewer rotations wins, as the seed ranks
    its two: utilisation-first's full blocks for the 1x1 layer at N=2k, the replication-driven
    half-full blocks for ResNet-50's at N=64k."""
    c = choose_mesh(layer, CKKS(n))
    assert (c.mesh, c.total.rotations) == (mesh, rotations)
    other = next(r for r in rank_meshes(layer, CKKS(n)) if r.mesh == beaten[0])
    assert other.total.rotations == beaten[1] > rotations


def test_nothing_fits_or_a_bad_policy():
    with pytest.raises(ShardingError, match="fits no ciphertext mesh of at most 2"):
        choose_mesh(RESNET50, CKKS(65536), max_ciphertexts=2)
    with pytest.raises(ValueError, match="unknown mesh policy"):
        rank_meshes(SEED, CKKS(2048), policy="bytes")
