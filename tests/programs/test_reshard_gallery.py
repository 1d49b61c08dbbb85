"""programs/reshard_gallery.py: each classic reshard moves what its plan says, and the plan's bytes
are derived by hand (float32, mesh {x: 2, y: 2}: devices 0..3 at (x, y) = (0,0), (0,1), (1,0), (1,1))."""

import pytest

from simshard.programs import reshard_gallery as gallery

F32 = 4
# name -> (collectives the run executes, bytes received over all devices)
EXPECTED = {
    # [8, 12] rows over x -> replicated: every device receives the other [4, 12] half
    "gather": (["all_gather"], 4 * (4 * 12 * F32)),
    # x moves from dim 0 to dim 1: every device keeps [4, 6] of its [4, 12] and receives [4, 6]
    "move": (["all_to_all"], 4 * (4 * 6 * F32)),
    # block (rows a, cols b) -> (rows b, cols a): devices 0 and 3 keep theirs, 1 and 2 swap [4, 6]
    "swap": (["collective_permute"], 2 * (4 * 6 * F32)),
    # rows over x -> rows over y: devices (0,1) and (1,0) need the other [4, 12] half
    "rename": (["collective_permute"], 2 * (4 * 12 * F32)),
    # partial [8, 12] over 4 devices -> rows over (x, y): each receives 3 partials of its [2, 12]
    "partial": (["reduce_scatter"], 4 * 3 * (2 * 12 * F32)),
    # [7, 6] rows in blocks 2, 2, 2, 1 -> columns 3 + 3 over x: each device needs 7 x 3 elements
    # and holds (its rows) x 3 of them: 15 + 15 + 15 + 18 elements arrive, in 3 exchange rounds
    "uneven": (["collective_permute"] * 3, (15 + 15 + 15 + 18) * F32),
}


def test_the_gallery_covers_the_classics():
    assert set(gallery.PROGRAM.strategy_names) == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_reshard_moves_what_its_plan_says(run_strategy, name):
    kinds, received = EXPECTED[name]
    res = run_strategy("reshard_gallery", name)
    ran = sorted({(r.instr, r.kind) for r in res.comm.records})
    assert [k for _, k in ran] == kinds
    assert res.comm.total_received == received
    plan = gallery.plan(name)
    assert plan.bytes == received and plan.minimum_bytes == received
    steps = [s.kind for s in plan.steps if s.kind != "slice"]
    assert steps == (["exchange"] if name == "uneven" else kinds)


def test_plans_render_every_strategy():
    text = gallery.PROGRAM.extras["plans"]()
    assert list(text) == list(EXPECTED)
    assert "all_gather dim 0 over x" in text["gather"] and "exchange in 3 rounds" in text["uneven"]
    assert "reduce_scatter dim 0 over x,y" in text["partial"]


def test_plans_follow_another_mesh():
    # on {x: 2, y: 4}, rows over x -> over y is no longer a pure permute: a local slice comes first
    plan = gallery.plan("rename", mesh={"x": 2, "y": 4})
    assert [s.kind for s in plan.steps] == ["slice", "collective_permute"]
