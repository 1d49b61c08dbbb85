"""Reading command-line values: meshes, shapes, bandwidths, latencies, topologies."""

import pytest

from simshard.cli import options
from simshard.cli.errors import UsageError
from simshard.report import Link, Topology


def test_mesh_and_shape():
    assert options.parse_mesh("x=2, y=4").shape == {"x": 2, "y": 4}
    for bad in ("x", "x=", "=2", "x=2;y=4", "x=-1"):
        with pytest.raises(UsageError, match="name=size pairs"):
            options.parse_mesh(bad)
    assert [options.parse_shape(t) for t in ("8,16", "8x16", "(8, 16)", "[8]", "(8,)", "()")] == [
        (8, 16), (8, 16), (8, 16), (8,), (8,), ()]
    for bad in ("8,a", "8,,16", "3x", "-1"):
        with pytest.raises(UsageError, match="a shape is sizes"):
            options.parse_shape(bad)


@pytest.mark.parametrize("text, value", [
    ("25e9", 25e9), ("25GB/s", 25e9), ("300 GB/s", 300e9), ("32GiB/s", 32 * 2**30), ("1.5MB", 1.5e6), ("100kB/s", 1e5),
])
def test_bandwidth_units(text, value):
    assert options.parse_bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("text, value", [("5e-6", 5e-6), ("5us", 5e-6), ("5 µs", 5e-6), ("0.5ms", 5e-4), ("0", 0.0)])
def test_latency_units(text, value):
    assert options.parse_latency(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["25Gb/s", "fast", "-1GB/s", "0"])
def test_bad_bandwidths(text):
    with pytest.raises(UsageError, match="bytes per second"):
        options.parse_bandwidth(text)


def test_topology_from_flags_in_mesh_order_with_defaults():
    topo = options.topology(None, ["y=300GB/s", "50GB/s"], ["x=10us,y=1us"], ["x", "y", "z"])
    assert topo == Topology({"x": Link(50e9, 10e-6), "y": Link(300e9, 1e-6)}, Link(50e9, options.DEFAULT_LINK.latency))
    assert options.describe_topology(topo) == (
        "x: 50.00 GB/s + 10.00 us/message; y: 300.00 GB/s + 1.00 us/message; other axes: 50.00 GB/s + 5.00 us/message")
    assert options.topology(None, [], [], ["x"]) == Topology({}, options.DEFAULT_LINK)


def test_a_topology_file_without_default_uses_the_built_in_one(tmp_path):
    f = tmp_path / "t.json"
    f.write_text('{"links": {"x": {"bandwidth": "1GB/s", "latency": 0}}}')
    assert options.topology(str(f), [], [], ["x", "y"]) == Topology({"x": Link(1e9, 0.0)}, options.DEFAULT_LINK)
