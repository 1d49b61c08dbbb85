"""The commands' logic, in this process through ``main(argv)`` (the suite's local backend):
verdicts and ``--exact``, the topology flags, compare's marking and plot, explain, show's three
spellings, the progress display and ``--quiet``."""

import io
import os
import re
import subprocess
import json
import sys
import time

import pytest

from cli_helpers import DATA, ROOT, main_in_process, simshard

TINY = str(DATA / "tiny.py")


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")


def _row(out: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is ``first``."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in\n{out}")


# -- run ----------------------------------------------------------------------------------------

def test_run_a_program_file_with_collectives_over_two_axes(capsys):
    r = main_in_process(capsys, "run", TINY, "--strategy", "rows", "--bandwidth", "x=1GB/s,y=2GB/s", "--latency", "0")
    assert r.code == 0, r.err
    assert "tiny / rows: rows over x, columns over y, gathered whole" in r.out
    assert "topology x: 1.00 GB/s + 0 s/message; y: 2.00 GB/s + 0 s/message; other axes: 25.00 GB/s + 0 s/message" in r.out
    # device (i, j) gets the other x-block of its [4, 2] column: 32 B at 1 GB/s = 32 ns ...
    assert _row(r.out, "reshard %3 for output 0")[1:] == ["all_gather", "x", "1", "4", "128 B", "128 B", "1.00", "32.00 ns"]
    total = _row(r.out, "total")
    assert total[3:] == ["2", "8", "384 B", "384 B", "1.00", "64.00 ns"]  # ... then 64 B over y at 2 GB/s


def test_run_a_strategy_built_as_jit(capsys):
    r = main_in_process(capsys, "run", TINY, "-s", "jit")
    assert r.code == 0, r.err
    assert _row(r.out, "total")[5] == "512 B"


def test_reassociated_floats_verify_unless_exact(capsys):
    floats = str(DATA / "floats.py")
    r = main_in_process(capsys, "run", floats)
    assert r.code == 0
    assert "verified up to reassociation: outputs differ by at most 11 ULP" in r.out
    assert "op %2 dot_general: reassociated sum over mesh axes x" in r.out
    r = main_in_process(capsys, "run", floats, "--exact")
    assert r.code == 1
    assert "verification not bitwise identical (--exact): op %2 dot_general" in r.out


def test_an_exception_from_the_program_exits_4_with_its_traceback(capsys):
    r = main_in_process(capsys, "run", str(DATA / "raises.py"))
    assert r.code == 4 and r.out == ""
    assert "Traceback" in r.err and "ValueError: the program's own mistake" in r.err
    assert r.err.rstrip().endswith("(from the program's own code, or a bug in simshard)")


def test_topology_file_with_units(capsys, tmp_path):
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"links": {"x": {"bandwidth": "300GB/s", "latency": "1us"}},
                                "default": {"bandwidth": 25e9, "latency": 5e-6}}))
    r = main_in_process(capsys, "run", TINY, "-s", "contract", "--topology", str(topo))
    assert r.code == 0, r.err
    assert "topology x: 300.00 GB/s + 1.00 us/message; other axes: 25.00 GB/s + 5.00 us/message" in r.out
    assert _row(r.out, "total")[-1] == "2.00 us"  # 2 messages of 1 us + 128 B at 300 GB/s per device


@pytest.mark.parametrize("args, message", [
    (("--topology", "t.json", "--latency", "1us"), "not both"),
    (("--bandwidth", "z=1GB/s"), "names mesh axes 'z' that the mesh does not have (axes: x, y)"),
    (("--latency", "soon"), "--latency: a latency is a number of seconds"),
    (("--bandwidth", "0"), "--bandwidth: a bandwidth is a positive number"),
    (("--address", "ray://x:1", "--backend", "local"), "--address names a Ray cluster"),
    (("--mesh", "x=2,x=2"), 'axis "x" appears twice in the mesh'),
])
def test_bad_flags_exit_2(capsys, args, message):
    r = main_in_process(capsys, "run", "mlp", *args)
    assert r.code == 2 and message in r.err and r.out == ""


def test_a_bad_topology_file_exits_2(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"links": {"x": {"bandwith": 1e9}}}')
    r = main_in_process(capsys, "run", "mlp", "--topology", str(bad))
    assert r.code == 2 and "--topology" in r.err and "bandwith" in r.err


# -- compare ------------------------------------------------------------------------------------

def test_compare_columns_per_axis_and_the_cheapest(capsys):
    r = main_in_process(capsys, "compare", TINY)
    assert r.code == 0, r.err
    rows = {name: _row(r.out, name) for name in ("rows *", "contract", "jit")}
    header = next(line for line in r.out.splitlines() if "strategy" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "strategy", "verified", "bytes", "over x", "over y", "est. time", "peak memory", "collectives"]
    # two all-gathers of 4 messages (2 x 5 us) beat one all-reduce of 8 (2 x 5 us + 512 B / 25 GB/s)
    assert rows["rows *"][1:] == ["bitwise", "384 B", "128 B", "256 B", "10.00 us", "224 B", "2"]
    assert rows["contract"][1:] == ["bitwise", "512 B", "512 B", "0 B", "10.01 us", "320 B", "1"]
    assert rows["jit"][1:] == rows["contract"][1:]
    # with free messages only bytes count: 32 B + 64 B per device at 25 GB/s, against 128 B
    r = main_in_process(capsys, "compare", TINY, "--strategies", "jit,contract,rows", "--latency", "0", "-q")
    assert [_row(r.out, name)[5] for name in ("jit", "contract", "rows *")] == ["5.12 ns", "5.12 ns", "3.84 ns"]


def test_compare_says_when_the_cheapest_is_not_bitwise(capsys):
    """The transformer's training step: Megatron is the cheapest and verifies only up to
    reassociation: marked ``*~``, said under the table. dp reassociates too (a weight's gradient
    is one contraction over batch and sequence, which it splits over the devices), so --exact
    ranks neither and says why each failed: a reassociated sum, not a wrong partition."""
    r = main_in_process(capsys, "compare", "transformer", "--strategies", "dp,megatron")
    assert r.code == 0, r.err
    mega, dp = _row(r.out, "megatron *~"), _row(r.out, "dp")
    assert dp[1].endswith(" ULP") and mega[1].endswith(" ULP")
    assert f"*~ megatron is the cheapest but not bitwise: verified up to reassociation of float sums, {mega[1]} at most" \
        in " ".join(r.out.split())
    r = main_in_process(capsys, "compare", "transformer", "--strategies", "dp,megatron", "--exact")
    assert _row(r.out, "dp")[1] == _row(r.out, "megatron")[1] == "FAILED" and "*~" not in r.out
    text = " ".join(r.out.split())
    assert text.count("float additions ran in another order, not a wrong partition") == 2


def test_compare_shows_fsdps_trade_of_bytes_for_memory(capsys):
    """ZeRO-3 (``fsdp``) gathers the layers' weights again in the backward pass: more bytes, a
    lower peak than keeping them (``fsdp-no-reshard``)."""
    r = main_in_process(capsys, "compare", "gpt", "--strategies", "fsdp,fsdp-no-reshard", "--estimate")
    assert r.code == 0, r.err
    zero3, keep = (_row(r.out, _name(r.out, s)) for s in ("fsdp", "fsdp-no-reshard"))
    header = [c.strip() for c in next(line for line in r.out.splitlines() if "strategy" in line).split("┃")[1:-1]]
    nbytes, peak = header.index("bytes"), header.index("peak memory")
    assert _size(zero3[nbytes]) > _size(keep[nbytes]) and _size(zero3[peak]) < _size(keep[peak])


def _name(out: str, strategy: str) -> str:
    """The first cell of ``strategy``'s row, marked or not."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0].split(" ")[0] == strategy:
            return cells[0]
    raise AssertionError(f"no row {strategy!r} in\n{out}")


def _size(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


def test_compare_reports_a_failed_strategy_and_exits_1(capsys):
    r = main_in_process(capsys, "compare", str(DATA / "drift.py"))
    assert r.code == 1
    assert _row(r.out, "rows")[1] == "FAILED"
    assert "rows: output 0: 14 of 16 elements differ" in r.out
    assert "*" not in _row(r.out, "rows")[0]


def test_device_memory_fails_a_strategy_that_does_not_fit_and_compare_goes_on(capsys, tmp_path):
    r = main_in_process(capsys, "compare", TINY, "--device-memory", "300B", "--json", str(tmp_path / "m.json"))
    assert r.code == 3
    assert _row(r.out, "contract")[1:] == ["OUT OF MEMORY", "-", "-", "-", "-", "-", "-"]
    assert _row(r.out, "rows *")[1:3] == ["bitwise", "384 B"]  # 224 B at its peak
    assert "contract: device 0 out of memory at position 0 [0] compute dot_general from '%2 dot_general': " \
           "needs 320 B (320 bytes: 128 B new on top of 192 B live), capacity 300 B (300 bytes)" in r.out
    doc = json.loads((tmp_path / "m.json").read_text())
    assert [s["error"] is not None for s in doc["strategies"]] == [False, True, True] and doc["cheapest"] == "rows"
    r = main_in_process(capsys, "run", TINY, "-s", "jit", "--device-memory", "300")
    assert r.code == 3
    assert "the run could not finish: device 0 out of memory at position 0" in r.out
    assert main_in_process(capsys, "run", TINY, "--device-memory", "lots").code == 2


def test_compare_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "cmp.png"
    r = main_in_process(capsys, "compare", "mlp", "--plot", str(png))
    assert r.code == 0, r.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_compare_plot_without_matplotlib_says_how_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    r = main_in_process(capsys, "compare", "mlp", "--plot", str(tmp_path / "x.png"))
    assert r.code == 2
    assert "pip install simshard[plot]" in r.err and r.out == ""


# -- explain ------------------------------------------------------------------------------------

def test_explain_one_value_of_a_program_file(capsys):
    r = main_in_process(capsys, "explain", TINY, "-s", "contract", "--value", "0")
    assert r.code == 0, r.err
    assert "program(%0(a): f32[8,8@x], %1(b): f32[8@x,4]) {" in r.out
    why = r.out.split("why each value has its sharding")[1].strip().splitlines()
    assert why[0].startswith("%3 f32[8,4]: ") and len([w for w in why if not w.startswith("  ")]) == 1
    r = main_in_process(capsys, "explain", TINY, "--value", "nope")
    assert r.code == 2 and "no such value (named values: a, b; outputs 0..0)" in r.err


def test_explain_explicit_mode_says_nothing_was_propagated(capsys, tmp_path):
    prog = tmp_path / "explicit_prog.py"
    prog.write_text(
        "import simshard as ss\n"
        "from simshard import P\n"
        "from simshard.programs import ProgramDef, Strategy\n"
        "def f(a):\n"
        "    return a * 2.0\n"
        "def build(mesh):\n"
        "    em = ss.make_mesh(tuple(mesh.shape.values()), tuple(mesh.shape), axis_types=ss.AxisType.Explicit)\n"
        "    return ss.jit(f, in_shardings=(P('x'),), mesh=em)\n"
        "PROGRAM = ProgramDef(name='e', about='a * 2 [explicit]', fn=f, inputs=lambda: (ss.exact_inputs([(4,)])[0],),\n"
        "                     mesh={'x': 2}, strategies=(Strategy('types', 'types carry shardings', build=build),))\n")
    r = main_in_process(capsys, "explain", str(prog))
    assert r.code == 0, r.err
    assert "mesh x=2, mode explicit\n" in r.out and "%1: f32[4@x] = mul(%0(a), 2.0)" in r.out
    assert "nothing was propagated" in r.out and "why each value" not in r.out
    r = main_in_process(capsys, "compare", str(prog))
    assert r.code == 0 and "e: a * 2 [explicit]" in r.out  # brackets are text, not markup


# -- show ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ['<@m, [{"y"}, {"x"}]>', 'P("y", "x")', "PartitionSpec('y', 'x')",
                                  "[Shard(1), Shard(0)]", "S(1), S(0)"])
def test_show_three_spellings_of_one_layout(capsys, text):
    r = main_in_process(capsys, "show", text, "4x8", "--mesh", "x=2,y=2")
    assert r.code == 0, r.err
    assert "type:       f32[4@y,8@x]" in r.out
    assert "P:          P('y', 'x')" in r.out


def test_show_says_what_a_spelling_cannot_express(capsys):
    r = main_in_process(capsys, "show", "[Shard(0), Shard(0)]", "10", "--mesh", "x=2,y=4")
    assert r.code == 0, r.err
    assert "Shardy:     not expressible" in r.out
    r = main_in_process(capsys, "show", '<@mesh, [{"x"}], replicated={"y"}>', "8", "--mesh", "x=2,y=4")
    assert "P:          not expressible (P has no explicitly replicated axes)" in r.out


@pytest.mark.parametrize("args, message", [
    (("hello", "8"), "cannot tell which spelling 'hello' is"),
    (("P(x)", "8"), "cannot read a PartitionSpec from 'P(x)'"),
    (("[Shard(0), Foo()]", "8"), "cannot read a placement from ' Foo()'"),
    (("[Shard(0)]", "8"), "1 placements for mesh"),
    (('P("x")', "8,a"), "a shape is sizes separated by commas"),
])
def test_show_bad_input(capsys, args, message):
    r = main_in_process(capsys, "show", *args)
    assert r.code == 2 and message in r.err


# -- progress -----------------------------------------------------------------------------------

def test_progress_shows_on_a_terminal_and_not_with_quiet():
    from rich.console import Console

    from simshard.cli.output import Output

    def steps(quiet):
        err = io.StringIO()
        out = Output(Console(file=io.StringIO()), Console(file=err, force_terminal=True, width=100), quiet)
        with out.steps("mlp on local", 2) as advance:
            advance("dp")
            advance("megatron")
        with out.spinner("mlp/dp") as stage:
            stage("starting 8 Ray device actors")  # ss.run's progress= names the stage
        return out.live, err.getvalue()

    live, shown = steps(quiet=False)
    assert live and "mlp on local: megatron" in shown and "mlp/dp: starting 8 Ray device actors" in shown
    assert steps(quiet=True) == (False, "")


def test_compare_on_ray_starts_one_set_of_actors_for_all_strategies(ray_session, monkeypatch, capsys):
    from simshard.__main__ import main
    from simshard.runtime.ray.driver.mesh import RayMesh

    started = []
    real_start = RayMesh.start

    def counting_start(self):
        if not self.actors:
            started.append(self.devices)
        return real_start(self)

    monkeypatch.setattr(RayMesh, "start", counting_start)
    code = main(["compare", "mlp", "--strategies", "dp,2d", "--backend", "ray", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("bitwise") == 2
    assert started == [tuple(range(8))]  # one RayMesh of 8 device actors served both strategies


def test_algorithm_changes_bytes_and_messages_never_bits(capsys, tmp_path):
    import json

    from simshard.__main__ import main

    docs = {}
    for algorithm in ("direct", "oneshot"):
        path = tmp_path / f"{algorithm}.json"
        assert main(["run", "mlp", "--strategy", "megatron", "--backend", "local", "--quiet",
                     "--algorithm", algorithm, "--json", str(path)]) == 0
        docs[algorithm] = json.loads(path.read_text())["strategies"][0]
    capsys.readouterr()
    # megatron: one all-reduce of a [16, 32] float32 (2 KiB) per device over all 8 devices:
    # direct sends 2(g-1)/g of it per device, oneshot the whole of it to each of 7 peers
    assert docs["direct"]["total_bytes"] == 8 * 2 * 7 * 2048 // 8
    assert docs["oneshot"]["total_bytes"] == 8 * 7 * 2048
    assert docs["direct"]["verified"] and docs["oneshot"]["verified"]


# -- a new user's mistakes and habits (issue 11) ----------------------------------------------------
def test_a_file_that_is_no_program_is_a_usage_error(capsys, tmp_path):
    data = tmp_path / "report.json"
    data.write_text("{}")
    ran = main_in_process(capsys, "run", str(data))
    assert ran.code == 2
    assert "is not a program" in ran.err and "a .py file that defines PROGRAM" in ran.err


def test_a_reader_that_stops_early_is_no_error():
    """``simshard compare mlp | head -1``: the command ends with 0 and says nothing."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SIMSHARD_BACKEND="local")
    p = subprocess.Popen([sys.executable, "-m", "simshard", "compare", "mlp"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=ROOT)
    p.stdout.readline()
    p.stdout.close()
    assert p.wait(timeout=120) == 0
    assert p.stderr.read() == b""


def test_show_summarises_a_mesh_too_large_to_draw(capsys):
    ran = main_in_process(capsys, "show", 'P("x", "y")', "1024,1024", "--mesh", "x=1024,y=1024")
    assert ran.code == 0
    assert "1,048,576 devices: more than the 256 drawn" in ran.out
    assert "dim 0: 1,024 blocks of 1" in ran.out and len(ran.out.splitlines()) < 10


def test_an_unreachable_address_exits_3_naming_it():
    ran = simshard("run", "mlp", "--address", "127.0.0.1:1", backend="ray")  # a fresh process: no Ray yet
    assert ran.code == 3
    assert "cannot reach a Ray cluster at 127.0.0.1:1" in ran.err


def test_the_main_job_on_ray_is_silent_on_stderr_with_quiet():
    """``simshard run mlp -q`` on the default backend (a local Ray started on demand): the tables on
    stdout and nothing on stderr, no Ray start-up or worker log lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("SIMSHARD_BACKEND", "RAY_ADDRESS")}
    p = subprocess.run([sys.executable, "-m", "simshard", "run", "mlp", "-q"], capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "backend ray" in p.stdout and p.stderr == ""


def test_devices_per_process_runs_the_devices_in_fewer_ray_processes(capsys, ray_session):
    ran = main_in_process(capsys, "run", "mlp", "--backend", "ray", "--devices-per-process", "4", "-q")
    assert ran.code == 0, ran.err
    # the routes its messages took, so that a peer reached by Ray calls would show
    assert re.search(r"backend ray \(data plane: sockets; messages between devices: none \(device "
                     r"pairs: process 24, unix 32\); run calls: the driver's control lines \(\d of 2 calls, \d "
                     r"answers by ring\)(; polling stepped aside \d+ times \(another task wanted the cores\))?\)",
                     ran.out), ran.out
    assert "bitwise" in ran.out


def test_devices_per_process_is_refused_on_the_local_backend_and_when_it_does_not_divide(capsys, ray_session):
    ran = main_in_process(capsys, "run", "mlp", "--backend", "local", "--devices-per-process", "2")
    assert ran.code == 2 and "--devices-per-process places Ray device actors" in ran.err
    ran = main_in_process(capsys, "run", "mlp", "--backend", "ray", "--devices-per-process", "3", "-q")
    assert ran.code != 0 and "devices_per_process=3 does not divide the 8 devices" in ran.err


# -- estimate -------------------------------------------------------------------------------------

def test_compare_estimate_reports_what_the_runs_report_without_running(capsys, tmp_path):
    ran, est = tmp_path / "ran.json", tmp_path / "est.json"
    assert main_in_process(capsys, "compare", TINY, "--json", str(ran), "-q").code == 0
    r = main_in_process(capsys, "compare", TINY, "--estimate", "--json", str(est), "-q")
    assert r.code == 0, r.err
    assert _row(r.out, "rows *")[1] == "estimated"
    runs, ests = json.loads(ran.read_text()), json.loads(est.read_text())
    assert ests["backend"] == "none" and ests["cheapest"] == runs["cheapest"]
    costs = ("total_bytes", "min_bytes", "bytes_per_axis", "messages", "collectives", "estimated_time_s",
             "peak_memory_bytes", "max_peak_memory_bytes")
    for a, b in zip(runs["strategies"], ests["strategies"]):
        assert b["estimated"] and not b["verified"] and not a["estimated"]
        assert {k: a[k] for k in costs} == {k: b[k] for k in costs}


def test_the_estimate_command_costs_a_mesh_too_large_to_run(capsys):
    r = main_in_process(capsys, "estimate", "mlp", "--strategy", "megatron", "--mesh", "x=32,y=32", "-q")
    assert r.code == 0, r.err
    assert "(1024 devices), estimated without running" in r.out and "estimated, not run" in r.out
    assert "all_reduce" in r.out


@pytest.mark.parametrize("flag, value", [("--algorithm", "ring"), ("--node-axes", "x")])
def test_estimate_refuses_the_flags_only_a_run_honours(capsys, flag, value):
    r = main_in_process(capsys, "estimate", TINY, flag, value, "-q")
    assert r.code == 2 and flag in r.err


def test_the_estimate_judges_its_peak_against_device_memory(capsys, tmp_path):
    """``--device-memory`` with ``--estimate``: the peak against that capacity, in words and in
    the JSON; on a topology naming a device, against the device's memory, with the step time."""
    out = tmp_path / "out.json"
    r = main_in_process(capsys, "estimate", TINY, "--device-memory", "200B", "--json", str(out), "-q")
    assert r.code == 0, r.err
    assert "memory: peaks at 224 B on every device; does not fit a device of 200 B (--device-memory)" in r.out
    (s,) = json.loads(out.read_text())["strategies"]
    assert s["memory_fits"] is False and s["memory_verdict"].startswith("peaks at 224 B")
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"default": "nvlink", "device": "h100"}))
    r = main_in_process(capsys, "estimate", TINY, "--topology", str(topo), "--json", str(out), "-q")
    (s,) = json.loads(out.read_text())["strategies"]
    assert "fits an 80 GB H100 device" in r.out and s["memory_fits"] is True
    assert s["step_s"] == pytest.approx(s["compute_s"] + s["exposed_comm_s"]) and s["compute_s"] > 0
    assert "step " in r.out and "compute " in r.out and "exposed" in r.out


def test_compare_ranks_estimates_by_step_time(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # every column whole: a row a line
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"links": {"y": "nvlink"}, "default": "infiniband", "device": "a100"}))
    out = tmp_path / "out.json"
    r = main_in_process(capsys, "compare", "mlp", "--estimate", "--mesh", "x=64,y=128", "--topology", str(topo),
                        "--json", str(out), "-q")
    assert r.code == 0, r.err
    strategies = json.loads(out.read_text())["strategies"]
    ranked = sorted(strategies, key=lambda s: s["step_s"])
    assert ranked[0]["cheapest"] and all(s["step_s"] is not None for s in strategies)
    cells = [line.split("│")[1].strip().rstrip(" *") for line in r.out.splitlines() if line.startswith("│")]
    rows = [c for c in cells if c]  # a row wrapped over several lines has its name on the first
    assert rows[:len(strategies)] == [s["name"] for s in ranked]  # the table lists them by step time
    for col in ("compute", "comm.", "exposed", "step"):
        assert col in r.out
    assert "models no" in r.out and "overlap" in r.out  # the caption says exposed is all the communication
    assert all(s["exposed_comm_s"] == s["estimated_time_s"] for s in strategies)
    assert "hold no share of x (idle)" in r.out  # the batch of 64 over 8,192 devices


def test_a_topology_file_with_link_classes_and_nodes(capsys, tmp_path):
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"links": {"y": "nvlink"}, "default": "infiniband",
                                "nodes": {"size": 4, "link": "infiniband"}}))
    out = tmp_path / "out.json"
    r = main_in_process(capsys, "run", TINY, "--topology", str(topo), "--json", str(out), "-q")
    assert r.code == 0, r.err
    assert "nodes of 4 devices, joined by 50.00 GB/s + 5.00 us/message (collectives across nodes as NCCL runs them)" \
        in r.out
    from test_json_schema import validate

    doc = json.loads(out.read_text())
    validate(doc)  # the nodes are part of the documented schema
    assert doc["topology"]["nodes"] == {"size": 4, "link": {"bandwidth": 50e9, "latency": 5e-6}}


def test_show_reads_the_fhe_array_sharding(capsys):
    r = main_in_process(capsys, "show", "{y, z, -1}", "3,8,4", "--mesh", "x=2,y=3,z=2")
    assert r.code == 0 and '<@mesh, [{"y"}, {"z"}, {}]>' in r.out and "block=(1, 4, 4)" in r.out
    r = main_in_process(capsys, "show", "{1, 5}", "3,8", "--mesh", "x=2,y=3,z=2")
    assert r.code != 0 and "axis index 5 is not an axis of the mesh" in r.err


# -- bad input: exit 2, one line, at once (issue 29) ----------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (("--mesh", "x=²"), "--mesh expects name=size pairs"),
    (("--mesh", "x=" + "9" * 5000), "is larger than any mesh (at most 1048576 devices)"),
    (("--latency", "1e9999999"), "--latency: a latency is at most"),
    (("--latency", "1e999"), "--latency: a latency is at most"),
    (("--latency", "8" * 8000 + "x"), "--latency: a latency is a number"),
    (("--bandwidth", "1e400"), "--bandwidth: a bandwidth is at most"),
])
def test_bad_values_exit_2_in_one_line_at_once(capsys, flags, message):
    started = time.perf_counter()
    r = main_in_process(capsys, "run", TINY, "--estimate", *flags)
    assert time.perf_counter() - started < 5
    assert r.code == 2 and message in r.err, r.err
    assert "Traceback" not in r.err + r.out and r.err.strip().count("\n") == 0


def test_an_absurd_device_memory_is_argparses_usage_error(capsys):
    r = main_in_process(capsys, "run", TINY, "--estimate", "--device-memory", "1e999999")
    assert r.code == 2 and "a size is at most" in r.err and "Traceback" not in r.err + r.out


@pytest.mark.parametrize("text, message", [
    ('{"default": {"bandwidth": 1' + "0" * 400 + ', "latency": 0}}', "bandwidth"),
    ('{"default": {"bandwidth": 1e400, "latency": 0}}', "bandwidth"),
    ('{"default": {"bandwidth": "' + "8" * 8000 + 'x"}}', "characters"),
    ("[" * 100_000 + "]" * 100_000, "nested"),
])
def test_bad_topology_files_exit_2_in_one_line(capsys, tmp_path, text, message):
    f = tmp_path / "t.json"
    f.write_text(text)
    started = time.perf_counter()
    r = main_in_process(capsys, "run", TINY, "--estimate", "--topology", str(f))
    assert time.perf_counter() - started < 5
    assert r.code == 2 and r.err.startswith("error: --topology") and message in r.err, r.err
    assert "Traceback" not in r.err + r.out and r.err.strip().count("\n") == 0
