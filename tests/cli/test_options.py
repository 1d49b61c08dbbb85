"""Reading command-line values: meshes, shapes, bandwidths, latencies, topologies."""

import time

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


# -- bad input (issue 29): refused in one line, quickly, never a traceback ----------------------------
@pytest.mark.parametrize("read", [options.parse_size, options.parse_bandwidth, options.parse_latency])
@pytest.mark.parametrize("text", ["8" * 8000 + "x", "1" * 8000, "." + "9" * 8000 + "e", "1e" + "9" * 8000])
def test_long_numbers_are_refused_at_once(read, text):
    started = time.perf_counter()
    with pytest.raises(UsageError, match="characters"):
        read(text)
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize("read, text", [
    (options.parse_size, "1e999999"), (options.parse_size, "1e30"), (options.parse_size, "99999999TiB"),
    (options.parse_bandwidth, "1e999"), (options.parse_bandwidth, "1e9999999"), (options.parse_bandwidth, "1e40TB/s"),
    (options.parse_latency, "1e999"), (options.parse_latency, "1e9999999"), (options.parse_latency, "1e7s"),
])
def test_absurd_magnitudes_are_refused(read, text):
    with pytest.raises(UsageError, match="at most"):
        read(text)


def test_sizes_keep_their_units():
    assert [options.parse_size(t) for t in ("5632", "5.5KiB", "16MiB", "1GB", "0", "1e3", ".5kB")] == [
        5632, 5632, 16 * 2**20, 10**9, 0, 1000, 500]
    for bad in ("", "x", "1e", "1.", "1..2", "-1", "1 KB/s", "1e3e3", "٣"):
        with pytest.raises(UsageError, match="a size is"):
            options.parse_size(bad)


@pytest.mark.parametrize("text", ["x=²", "x=" + "9" * 5000, "x=99999999999999999999", "x=٣"])
def test_mesh_sizes_are_ascii_and_bounded(text):
    with pytest.raises(UsageError, match="--mesh"):
        options.parse_mesh(text)


def topology_file(tmp_path, text: str) -> str:
    f = tmp_path / "t.json"
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("text", [
    '{"default": {"bandwidth": 1' + "0" * 400 + ', "latency": 0}}',
    '{"default": {"bandwidth": 1e400, "latency": 0}}',
    '{"default": {"bandwidth": 1e9, "latency": 1' + "0" * 400 + '}}',
    '{"default": {"bandwidth": 1e9, "latency": NaN}}',
    '{"default": {"bandwidth": true, "latency": 0}}',
    '{"default": {"bandwidth": "' + "1" * 8000 + 'x", "latency": 0}}',
    '{"default": "nvlink", "nodes": {"size": 1e400, "link": "nvlink"}}',
    '{"default": "nvlink", "nodes": {"size": 2.5, "link": "nvlink"}}',
    '{"default": "nvlink", "device": {"flops": 1e400, "memory_bandwidth": 1e12}}',
    "[" * 100_000 + "]" * 100_000,
    '{"links": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}",
])
def test_bad_topology_files_are_usage_errors(tmp_path, text):
    started = time.perf_counter()
    with pytest.raises(UsageError, match="--topology"):
        options.topology(topology_file(tmp_path, text), [], [], ["x"])
    assert time.perf_counter() - started < 1.0
