"""programs/conv.py: seed 003's 1x1 convolutions on ciphertext meshes: element-wise vs reduce
shards, the communication of each mesh derived from the shapes, and slot utilization."""

import io

import pytest
from rich.console import Console

from simshard.programs import conv

F32 = 4
HW = 7 * 7


def allreduce_bytes(devices, g, n):
    """Bytes all ``devices`` receive all-reducing an ``n``-byte array in groups of ``g``."""
    return devices * 2 * (g - 1) * n // g


def test_y4_input_channels_are_a_reduce_shard_over_y(run_strategy):
    res = run_strategy("conv", "y4")
    kinds = {(k.kind, k.axes, k.size) for k in conv.shard_kinds(res.program)}
    assert kinds == {("reduce", ("y",), 64)}
    assert conv.reductions(res) == [("all_reduce", ("y",))]
    # every ciphertext ends with the whole output[16,7,7]: 4 devices all-reduce it
    assert res.comm.total_bytes == allreduce_bytes(4, 4, 16 * HW * F32) == 18816
    assert res.outputs.shape == (1, 16, 7, 7)


def test_x2y8_output_channels_element_wise_over_x_input_channels_reduce_over_y(run_strategy):
    res = run_strategy("conv", "x2y8")
    kinds = {(k.kind, k.axes, k.size) for k in conv.shard_kinds(res.program)}
    assert kinds == {("reduce", ("y",), 64), ("element-wise", ("x",), 16)}
    assert conv.reductions(res) == [("all_reduce", ("y",))]
    assert {r.axes for r in res.comm.records} == {("y",)}
    # two groups of 8 ciphertexts each all-reduce their output[8,7,7]
    assert res.comm.total_bytes == allreduce_bytes(16, 8, 8 * HW * F32) == 43904
    assert {tuple(res.shards(d)[0].shape) for d in range(16)} == {(1, 8, 7, 7)}


def test_x4_unsharded_input_needs_no_reduction(run_strategy):
    res = run_strategy("conv", "x4")
    assert {(k.kind, k.axes) for k in conv.shard_kinds(res.program)} == {("element-wise", ("x",))}
    assert conv.reductions(res) == [] and res.comm.total_bytes == 0


def test_resnet50_layer_on_both_meshes(run_strategy):
    y4, x2y8 = run_strategy("conv", "resnet50_y4"), run_strategy("conv", "resnet50_x2y8")
    assert {(k.kind, k.axes, k.size) for k in conv.shard_kinds(y4.program)} == {("reduce", ("y",), 2048)}
    assert {(k.kind, k.axes, k.size) for k in conv.shard_kinds(x2y8.program)} == {
        ("reduce", ("y",), 2048), ("element-wise", ("x",), 512)}
    # output[512,7,7] all-reduced over 4 ciphertexts; on {2,8,1}, output[256,7,7] per x over 8
    assert y4.comm.total_bytes == allreduce_bytes(4, 4, 512 * HW * F32) == 602112
    assert x2y8.comm.total_bytes == allreduce_bytes(16, 8, 256 * HW * F32) == 1404928
    assert y4.outputs.shape == (1, 512, 7, 7)


@pytest.mark.parametrize("name, slots, per_ciphertext", [
    ("y4", 1024, 16 * HW),  # N=2k: input[16,7,7] per ciphertext; the output[16,7,7] replicated: 784 of 1024
    ("x2y8", 1024, 8 * HW),  # input[8,7,7] and output[8,7,7]: 392 of 1024 (a block of 512 slots)
    ("resnet50_y4", 32768, 512 * HW),  # N=64k: input[512,7,7] and the whole output[512,7,7]: 25088 of 32k
    ("resnet50_x2y8", 32768, 256 * HW),  # input[256,7,7] and output[256,7,7]: 12544 of 32k (a 16k block)
])
def test_slot_utilization_with_the_seeds_slot_counts(name, slots, per_ciphertext):
    rows = {r.array: r for r in conv.utilization(conv.case(name))}
    for array in ("input", "output"):
        r = rows[array]
        assert (r.slots, r.filled, r.fits) == (slots, per_ciphertext, True)
        assert r.ratio == pytest.approx(per_ciphertext / slots)


def test_x4_output_fills_a_quarter_of_the_channels_per_ciphertext():
    rows = {r.array: r for r in conv.utilization(conv.case("x4"))}
    assert rows["input"].filled == 16 * HW and rows["output"].filled == 16 * HW  # output[64] over x=4


def test_report_prints_the_tables():
    out = io.StringIO()
    results = conv.report(["y4", "x4"], Console(file=out, width=120, color_system=None), backend="local")
    assert all(r.verify.bitwise for r in results.values())
    text = out.getvalue()
    assert text.count("bitwise identical") == 2
    assert "element-wise" in text and "reduce" in text and "slot utilization" in text
    assert "all_reduce over y" in text and "reductions in the schedules: none" in text
    assert "rotations 4*(16*2) = 128" in text


def test_strategies_of_a_layer_are_ranked_by_ckks_rotations():
    """The seed's ranking of the ResNet-50 strategies: {2,8,1} before {1,4,1}, the reverse of bytes."""
    y4, x2y8 = conv.PROGRAM.cost_of("resnet50_y4"), conv.PROGRAM.cost_of("resnet50_x2y8")
    assert y4.model == x2y8.model == "CKKS" and y4.group == x2y8.group != conv.PROGRAM.cost_of("y4").group
    assert x2y8.key < y4.key
    assert dict(y4.values)["rotations"] == 4096 and dict(x2y8.values)["rotations"] == 784
    assert dict(conv.PROGRAM.cost_of("y4").values)["per ciphertext"] == "16*2"
    assert dict(conv.PROGRAM.cost_of("x2y8").values)["per ciphertext"] == "1+8"


def test_the_ckks_cost_follows_the_mesh_a_strategy_runs_on():
    on_own = conv.PROGRAM.cost_of("resnet50_x2y8")
    on_y4 = conv.PROGRAM.cost_of("resnet50_x2y8", {"x": 1, "y": 4, "z": 1})
    assert dict(on_own.values)["rotations"] == 784 and dict(on_y4.values)["rotations"] == 4096
    assert conv.PROGRAM.cost_of("y4", {"a": 2, "b": 2}) is None  # no ciphertext mesh: no CKKS cost


ROW = 16 * 28 * F32  # one input row of the 3x3 layer: 16 channels x 28 columns


@pytest.mark.parametrize("name, halo_rows", [
    # stride 1: output blocks = input blocks of 7 rows; a 3-row window reads one row past each
    # inner edge: 1, 2, 2, 1 rows
    ("z4_3x3", [1, 2, 2, 1]),
    # stride 2: output blocks of 4 rows read input rows 8k-1 .. 8k+7 of blocks of 7:
    # 1 (row 7), 2 (rows 14, 15), 3 (rows 21-23), 0 (rows 23-27 are its own)
    ("z4_3x3_s2", [1, 2, 3, 0]),
])
def test_rows_over_z_exchange_their_halo(run_strategy, name, halo_rows):
    res = run_strategy("conv", name)
    assert res.verify.bitwise
    assert {r.kind for r in res.comm.records} == {"collective_permute"}
    assert {r.axes for r in res.comm.records} == {("z",)}
    assert [sum(r.bytes_received for r in res.comm.records if r.device == d) for d in range(4)] == [
        n * ROW for n in halo_rows]
    assert conv.halo_bytes(res) == res.comm.total_bytes == 6 * ROW == 10752


def test_gathering_the_rows_instead_moves_fourteen_times_more(run_strategy):
    halo, gather = run_strategy("conv", "z4_3x3"), run_strategy("conv", "z4_3x3_gather")
    assert gather.verify.bitwise and [r.kind for r in gather.comm.records][:1] == ["all_gather"]
    assert gather.comm.total_bytes == 4 * 21 * ROW == 150528  # every device receives the 21 rows it lacks
    assert gather.comm.total_bytes == 14 * halo.comm.total_bytes
