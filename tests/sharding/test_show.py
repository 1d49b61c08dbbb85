"""The layout drawings and the command line."""

import simshard as ss
from simshard.__main__ import main

MESH = ss.Mesh({"x": 2, "y": 4})


def test_grid_names_the_devices_of_each_block():
    text = ss.show(ss.Sharding.parse('<@mesh, [{"x"}, {"y"}]>', MESH), (8, 16))
    lines = [l for l in text.splitlines() if l.strip().startswith("│ 4:8")]
    assert lines and lines[0].split("│")[2:6] == [f"   {d}    " for d in (4, 5, 6, 7)]


def test_replicated_blocks_list_all_holders_and_empty_devices_are_named():
    text = ss.show(ss.Sharding.parse('<@mesh, [{"y"}]>', MESH), (3,))
    assert "0 4" in text and "1 5" in text and "2 6" in text
    assert "devices holding nothing (padding only): 3, 7" in text


def test_strided_layout_falls_back_to_a_device_table():
    text = ss.show(ss.DTensorSpec(ss.Mesh({"x": 4}), [ss.StridedShard(0, 2)]), (8,))
    assert "[1, 5]" in text and "local shape" in text


def test_cli_demo_and_show(capsys):
    """The drawing demo and ``show``; the main job (``simshard`` alone) is tested with ss.run."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "hold the same data on every device: True" in out
    assert main(["show", '<@mesh, [{"x"}, {}]>', "4,4", "--mesh", "x=2"]) == 0
    capsys.readouterr()
    assert main(["show", '<@mesh, [{"q"}]>', "4", "--mesh", "x=2"]) == 2
    captured = capsys.readouterr()
    assert "unknown-axis" in captured.err and captured.out == ""  # errors go to stderr
