"""The auto strategy of the library's programs against their hand-written ones, on the mesh
``compare`` uses: its estimated training step is no slower than the best of them, it runs bit
for bit, and ``simshard autoshard`` / ``compare --auto`` print it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import simshard as ss
from simshard import programs

pytest.importorskip("scipy")
sys.path.insert(0, str(Path(__file__).parent.parent / "cli"))

from cli_helpers import main_in_process  # noqa: E402

TOPOLOGY = ss.Topology({}, "nvlink", device="h100")


def step_seconds(program, strategy, mesh=None) -> float:
    return program.estimate(strategy, mesh=mesh, mode="sgd", topology=TOPOLOGY).step_seconds()


# The programs' own meshes are in test_no_slower.py (with the model = estimate, fit and run checks);
# here a mesh `compare` does not offer.
@pytest.mark.parametrize("name, mesh", [("mlp", {"x": 4, "y": 2})])
def test_auto_is_no_slower_than_the_best_hand_written_strategy(name, mesh):
    program = programs.load(name)
    m = program.mesh_for(None, mesh)
    best = min(step_seconds(program, s, m) for s in program.strategies)
    assert step_seconds(program, program.auto(topology=TOPOLOGY, explain_top=0), m) <= best


def test_the_auto_training_step_of_mlp_runs_bit_for_bit_within_its_budget():
    program = programs.load("mlp")
    auto = program.auto(device_memory=40_000, topology=TOPOLOGY)
    res = program.run(auto, mode="sgd", backend="local", device_memory=40_000)
    assert res.verify.bitwise
    found = auto.search(program.mesh_for(auto), "sgd")
    assert any(s.dims and any(d.axes for d in s.dims) for s in found.in_shardings)  # the budget forced a split


def test_simshard_autoshard_prints_the_strategy_its_costs_and_why(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = main_in_process(capsys, "autoshard", "mlp", "--device-memory", "40KiB", "--estimate")
    assert r.code == 0, r.err
    assert "params['w1']" in r.out and "P(" in r.out and "<@mesh" in r.out and "S(" in r.out
    assert "estimated step" in r.out and "communication" in r.out and "memory per device" in r.out
    assert "dot_general" in r.out and "runner-up" in r.out and "decided by" in r.out
    assert "auto" in r.out


def test_compare_auto_adds_a_row_run_and_verified(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = main_in_process(capsys, "compare", "mlp", "--strategies", "dp,2d", "--auto", "--backend", "local", "--quiet")
    assert r.code == 0, r.err
    rows = [line for line in r.out.splitlines() if line.startswith("│ auto")]
    assert rows and "bitwise" in rows[0]
