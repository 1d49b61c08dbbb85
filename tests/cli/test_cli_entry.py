"""Every command through the real entry point (``python -m simshard`` in a subprocess): output,
exit codes, and that user mistakes end with one line on stderr, never a traceback."""

import json

import pytest

from cli_helpers import DATA, simshard


def test_run_prints_verdict_communication_and_memory_and_writes_json_and_trace(tmp_path):
    r = simshard("run", str(DATA / "tiny.py"), "--strategy", "rows", "--bandwidth", "x=1GB/s,y=2GB/s", "--latency", "0",
                 "--json", str(tmp_path / "run.json"), "--trace", str(tmp_path / "trace.json"))
    assert r.code == 0, r.err
    assert "verified: bitwise identical to plain numpy (1 output; 2 ops checked one by one)" in r.out
    # the [8, 4] result gathered whole: each device gets its x peer's [4, 2] block (32 B at 1 GB/s), then
    # its y peer's [8, 2] (64 B at 2 GB/s)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in r.out.splitlines() if "all_gather" in line]
    assert rows == [["reshard %3 for output 0", "all_gather", "x", "1", "4", "128 B", "128 B", "1.00", "32.00 ns"],
                    ["reshard %3 for output 0", "all_gather", "y", "1", "4", "256 B", "256 B", "1.00", "32.00 ns"]]
    assert "peak memory per device" in r.out and "224 B" in r.out
    assert r.err == ""  # no progress display when stderr is not a terminal
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["strategies"][0]["bytes_per_axis"] == {"x": 128, "y": 256} and doc["verified"] is True
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"} == set(range(4))
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}  # estimated, and measured
    assert trace["otherData"]["estimated_total_us"] == pytest.approx(0.064)


def test_compare_marks_the_cheapest():
    r = simshard("compare", "mlp", "--strategies", "megatron,dp", "--mode", "forward")
    assert r.code == 0, r.err
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in r.out.splitlines() if line.startswith("│")}
    assert set(rows) == {"megatron", "dp *"}  # data parallel moves nothing in the forward pass
    assert rows["dp *"][:2] == ["bitwise", "0 B"] and rows["megatron"][0] == "bitwise" and rows["megatron"][1] != "0 B"


def test_compare_shows_training_steps_by_default(tmp_path):
    """The issue's complaint: a forward pass marks data parallel free. The default is the SGD step,
    said so, where dp all-reduces every gradient and FSDP reduce-scatters them."""
    out = tmp_path / "c.json"
    r = simshard("compare", "mlp", "--strategies", "dp,fsdp", "--json", str(out))
    assert r.code == 0, r.err
    assert "mode sgd: training step: value_and_grad of" in r.out and "--mode forward" in r.out
    doc = json.loads(out.read_text())
    assert doc["mode"] == "sgd" and all(s["verified"] for s in doc["strategies"])
    dp = next(s for s in doc["strategies"] if s["name"] == "dp")
    assert dp["total_bytes"] > 0  # the gradient all-reduce (tests/programs checks which collectives)


def test_explain_lists_type_strings_and_why():
    r = simshard("explain", str(DATA / "tiny.py"), "--strategy", "rows")
    assert r.code == 0, r.err
    assert "%2: f32[8@x,4@y] = dot_general(%0(a), %1(b)" in r.out
    assert 'dim 1 {"y"}: from input b (p0) via dot_general -> mul factor b' in r.out
    assert "output 0: <@mesh, [{}, {}]>" in r.out  # the closed output sharding, beside the value's own


def test_show_reads_partition_specs_and_placement_lists():
    r = simshard("show", 'P("x", None)', "8,16")
    assert r.code == 0, r.err
    assert "│ 4:8 │ 4 5 6 7 │" in r.out and "placements: DTensorSpec(@mesh, [S(0), R])" in r.out
    r = simshard("show", "[Shard(1), Shard(0)]", "8,16")
    assert r.code == 0, r.err
    assert "type:       f32[8@y,16@x]" in r.out


@pytest.mark.parametrize("args, message", [
    (("run", "nope"), "no program 'nope' (available:"),
    (("run", "mlp", "--strategy", "zzz"), "program 'mlp' has no strategy 'zzz' (it has: dp, megatron"),
    (("compare", "mlp", "--mesh", "x=two"), "--mesh expects name=size pairs like x=2,y=4, got 'x=two'"),
    (("run", "mlp", "--mesh", "a=8"), 'axis "x" in dimension 0 does not exist in the mesh (axes: a)'),
    (("show", 'P("x", "q")', "8,8"), 'axis "q" in dimension 1 does not exist in the mesh (axes: x, y)'),
    (("show", '<@mesh, [{"x"}]>', "8,8"), "has 1 dimension shardings but the tensor has rank 2"),
    (("run", str(DATA / "broken.py")), "NameError: name 'undefined_name' is not defined (at "),
])
def test_bad_input_exits_2_with_a_message_and_no_traceback(args, message):
    r = simshard(*args)
    assert r.code == 2
    assert message in r.err and "Traceback" not in r.err + r.out
    assert r.err.startswith("error: ")


def test_failed_verification_exits_1():
    r = simshard("run", str(DATA / "drift.py"))
    assert r.code == 1
    assert "verification FAILED: output 0: 14 of 16 elements differ; first at index (0, 0): got 6.0, expected 12.0" in r.out


def test_no_command_runs_the_main_job():
    r = simshard()
    assert r.code == 0, r.err
    assert "bitwise identical to plain numpy" in r.out and "all_reduce" in r.out


def test_run_on_ray_device_actors():
    pytest.importorskip("ray")
    r = simshard("run", "mlp", "--strategy", "megatron", "--backend", "ray", backend=None, timeout=180)
    assert r.code == 0, r.err
    assert "backend ray" in r.out and "verified: bitwise identical" in r.out and "all_reduce" in r.out
