"""The command line tried as a new user would (issue 29): Ctrl-C ends in one line and exit 130,
piped tables are whole, ``compare --plot`` draws estimated strategies as estimated in readable
units."""

import os
import subprocess
import sys

import pytest

from cli_helpers import ROOT, main_in_process
from simshard.cli import compare as compare_command
from simshard.cli import run as run_command
from simshard.cli.plot import Status, draw, plot_data, unit_for, BYTE_UNITS, TIME_UNITS
from simshard.cli.summary import StrategySummary


def test_ctrl_c_during_a_run_exits_130_with_one_line_and_no_traceback(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # what Ctrl-C raises from inside ray.get

    monkeypatch.setattr(run_command, "run_strategy", interrupted)
    r = main_in_process(capsys, "run", "mlp", "-q")
    assert r.code == 130
    assert r.err == "interrupted\n" and "Traceback" not in r.out


def test_ctrl_c_during_compare_closes_the_actor_pool_first(capsys, monkeypatch):
    closed = []

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare_command, "run_strategy", interrupted)
    monkeypatch.setattr(compare_command.ActorPool, "__exit__", lambda self, *exc: closed.append(exc[0]))
    r = main_in_process(capsys, "compare", "mlp", "-q")
    assert (r.code, r.err) == (130, "interrupted\n")
    assert closed == [KeyboardInterrupt]


def test_piped_compare_without_columns_prints_every_cell_whole():
    """``simshard compare mlp --estimate | cat``: 113 columns of table, where rich cut the cells
    to fit 110 (``stra…``, ``mega…``)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(PYTHONPATH=str(ROOT), SIMSHARD_BACKEND="local")
    p = subprocess.run([sys.executable, "-m", "simshard", "compare", "mlp", "--estimate"], capture_output=True,
                       text=True, env=env, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    table = [line for line in p.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(table) == 8 and len({len(line) for line in table}) == 1
    assert "…" not in p.stdout and "..." not in p.stdout
    names = [line.split("│")[1].strip() for line in table if line.startswith("│")]
    assert names == ["dp", "megatron *", "fsdp", "2d"]  # timed as NCCL runs the collectives
    assert "┃ strategy " in p.stdout and "│ estimated │" in p.stdout


def _summary(name: str, total_bytes, time_s, *, verified=True, estimated=False, cheapest=False, error=None):
    return StrategySummary(
        name=name, about="", mesh={"x": 2}, devices=2, verified=verified, bitwise=verified, max_ulp=None,
        first_divergence=None, total_bytes=total_bytes, min_bytes=total_bytes, bytes_per_axis=None, messages=None,
        collectives=None, estimated_time_s=time_s, peak_memory_bytes=None, max_peak_memory_bytes=None,
        wall_time_s=0.0, error=error, cheapest=cheapest, estimated=estimated)


ESTIMATED = [
    _summary("dp", 33_533_952, 0.02558, verified=False, estimated=True),
    _summary("megatron", 16_756_736, 0.01023, verified=False, estimated=True),
    _summary("2d", 1_530_920, 0.00109, verified=False, estimated=True, cheapest=True),
]


def test_plot_of_estimates_shows_them_estimated_in_readable_units():
    data = plot_data("mlp", ESTIMATED)
    assert data.statuses == (Status.ESTIMATED, Status.ESTIMATED, Status.CHEAPEST)  # none "failed"
    assert "estimated without running" in data.title
    size, time = data.panels
    assert (size.ylabel, size.unit) == ("bytes sent (MiB)", "MiB")
    assert (time.ylabel, time.unit) == ("estimated time (ms)", "ms")
    assert size.heights == pytest.approx((31.98, 15.98, 1.46), abs=0.01)
    assert size.labels == ("31.98 MiB", "15.98 MiB", "1.46 MiB") and time.labels == ("25.58 ms", "10.23 ms", "1.09 ms")
    assert all(not label.endswith("(failed)") for label in size.labels + time.labels)


def test_plot_marks_failed_runs_and_only_them():
    data = plot_data("mlp", [_summary("dp", None, None, verified=False, error="device 0 out of memory"),
                             _summary("megatron", 900, 2e-6, verified=False),
                             _summary("2d", 512, 1e-6, cheapest=True), _summary("fsdp", 700, 3e-6)])
    assert data.statuses == (Status.FAILED, Status.FAILED, Status.CHEAPEST, Status.VERIFIED)
    assert [s.hatch for s in data.statuses] == ["//", "//", "", ""]
    assert data.panels[0].labels == ("failed", "900 B", "512 B", "700 B") and data.panels[0].unit == "B"
    assert data.panels[1].unit == "us" and data.panels[1].heights == pytest.approx((0.0, 2.0, 1.0, 3.0))
    assert "estimated" not in data.title


def test_units_keep_the_axis_between_one_and_a_thousand():
    assert unit_for([3e11], BYTE_UNITS) == (1024.0 ** 3, "GiB")
    assert unit_for([0.0, 0.0], TIME_UNITS) == (1e-9, "ns")
    assert unit_for([], BYTE_UNITS) == (1.0, "B")


def test_the_drawn_figure_has_no_axis_offset_and_hatches_as_decided():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    huge = [_summary("dp", 3 * 1024 ** 4, 12.5, verified=False, estimated=True),
            _summary("2d", 1024 ** 4, 2.0, verified=False, estimated=True, cheapest=True)]
    fig = draw(plot_data("gpt", huge))
    try:
        fig.canvas.draw()
        for ax, unit in zip(fig.axes, ("TiB", "s")):
            assert ax.get_ylabel().endswith(f"({unit})")
            assert ax.yaxis.get_offset_text().get_text() == ""  # no 1e10 above the axis
            assert [bar.get_hatch() or "" for bar in ax.patches] == ["..", ""]
            assert [t.get_text() for t in ax.get_xticklabels()] == ["dp", "2d"]
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["cheapest", "estimated, not run"]
    finally:
        plt.close(fig)
