"""programs/fhe_conv.py: seed 003's 1x1 convolution on its ciphertext meshes, run bitwise."""

import importlib.util
import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

ROOT = Path(__file__).parent.parent
_spec = importlib.util.spec_from_file_location("fhe_conv", ROOT / "programs" / "fhe_conv.py")
fhe_conv = importlib.util.module_from_spec(_spec)
sys.modules["fhe_conv"] = fhe_conv  # dataclasses look their module up
_spec.loader.exec_module(fhe_conv)


@pytest.mark.parametrize("key", ["y4", "x2y8", "x4"])
def test_runs_bitwise(key):
    _, res = fhe_conv.run_case(key)
    assert res.verify.bitwise, str(res.verify)
    assert res.comm.ratio == 1.0


def test_y4_input_channels_are_a_reduce_shard_over_y():
    _, res = fhe_conv.run_case("y4")
    kinds = {(k.kind, k.axes, k.size) for k in fhe_conv.shard_kinds(res.program)}
    assert kinds == {("reduce", ("y",), 64)}
    assert fhe_conv.reductions(res) == [("all_reduce", ("y",))]
    # every device ends with the whole output[16,7,7]: an all-reduce of 16*49 float32 over 4 devices
    # moves 2(g-1)/g of it per device.
    assert res.comm.total_bytes == 4 * 2 * 3 * (16 * 49 * 4) // 4
    assert res.outputs.shape == (1, 16, 7, 7)


def test_x2y8_output_channels_element_wise_over_x_input_channels_reduce_over_y():
    _, res = fhe_conv.run_case("x2y8")
    kinds = {(k.kind, k.axes, k.size) for k in fhe_conv.shard_kinds(res.program)}
    assert kinds == {("reduce", ("y",), 64), ("element-wise", ("x",), 16)}
    assert fhe_conv.reductions(res) == [("all_reduce", ("y",))]
    assert {r.axes for r in res.comm.records} == {("y",)}
    # two groups of 8 devices all-reduce output[8,7,7] each
    assert res.comm.total_bytes == 16 * 2 * 7 * (8 * 49 * 4) // 8
    assert {tuple(res.shards(d)[0].shape) for d in range(16)} == {(1, 8, 7, 7)}


def test_x_only_sharding_needs_no_reduction():
    _, res = fhe_conv.run_case("x4")
    kinds = {(k.kind, k.axes) for k in fhe_conv.shard_kinds(res.program)}
    assert kinds == {("element-wise", ("x",))}
    assert fhe_conv.reductions(res) == []
    assert res.comm.total_bytes == 0


def test_utilization_with_the_seeds_slot_counts():
    c, res = fhe_conv.run_case("x2y8")
    rows = {(name, slots): (filled, ratio) for name, slots, filled, ratio, _ in fhe_conv.utilization_rows(c, res)}
    assert rows[("input", 1024)][0] == 8 * 49
    assert rows[("input", 512)][1] == pytest.approx(392 / 512)
    c, res = fhe_conv.run_case("y4")
    rows = {(name, slots): (filled, ratio) for name, slots, filled, ratio, _ in fhe_conv.utilization_rows(c, res)}
    assert rows[("input", 1024)] == (784, pytest.approx(784 / 1024))


def test_main_prints_the_tables():
    out = io.StringIO()
    for key in fhe_conv.CASES:
        res = fhe_conv.report(key, Console(file=out, width=120, color_system=None))
        assert res.verify.bitwise
    text = out.getvalue()
    assert text.count("bitwise identical") == 3
    assert "element-wise" in text and "reduce" in text and "slot utilization" in text
