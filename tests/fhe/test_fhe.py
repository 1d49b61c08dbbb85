"""Seed 003: the FHE ArraySharding spec over a 3-D ciphertext mesh, and slot utilization."""

import math

import numpy as np

import simshard as ss


def test_example_1_six_blocks_replicated_over_x():
    mesh = ss.Mesh({"x": 4, "y": 3, "z": 2})
    spec = ss.fhe_spec(mesh, ("y", "z", -1))
    lay = ss.layout(spec, (3, 224, 224))
    blocks = lay.distinct_blocks()
    assert len(blocks) == 6
    assert {lay.local_shape(d) for d in lay.devices} == {(1, 112, 224)}
    # D[k] lives on mesh[x, y, z] with k = y*2 + z, for every x
    for k, (idx, devs) in enumerate(blocks):
        coords = {mesh.coords(d) for d in devs}
        assert {c[0] for c in coords} == {0, 1, 2, 3}
        assert {(c[1], c[2]) for c in coords} == {divmod(k, 2)}
        assert idx[0] == (k // 2,) and idx[1][0] == (k % 2) * 112


def test_example_2_eight_blocks_of_8x56x56():
    mesh = ss.Mesh({"x": 8, "y": 8, "z": 1})
    lay = ss.layout(ss.fhe_spec(mesh, ("y", "z", -1)), (64, 56, 56))
    blocks = lay.distinct_blocks()
    assert len(blocks) == 8
    assert {lay.local_shape(d) for d in lay.devices} == {(8, 56, 56)}
    assert all(len(devs) == 8 for _, devs in blocks)


def test_utilization_against_ciphertext_slots():
    mesh = ss.Mesh({"x": 4, "y": 3, "z": 2})
    spec = ss.fhe_spec(mesh, ("y", "z", -1))
    u = ss.utilization(spec, (3, 224, 224), slots=32768)
    assert u.fits and u.filled[0] == 112 * 224
    assert math.isclose(u.ratio, 112 * 224 / 32768)
    assert not ss.utilization(spec, (3, 224, 224), slots=16384).fits


def test_fhe_spec_is_shardable_data():
    mesh = ss.Mesh({"x": 1, "y": 4, "z": 1})
    spec = ss.fhe_spec(mesh, ("y", -1, -1))
    lay = ss.layout(spec, (64, 7, 7))
    a = np.arange(64 * 49, dtype=np.float64).reshape(64, 7, 7)
    assert np.array_equal(lay.assemble(lay.shard(a)), a)
    assert str(spec) == '<@mesh, [{"y"}, {}, {}]>'
