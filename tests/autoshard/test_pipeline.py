"""The pipeline search of the ``gpt`` program (``programs/gpt_pipeline.py``): Alpa's inter-op DP
over stages with ``ss.autoshard`` inside each, on a 4-layer ``tiny`` over ``pp=2, x=2``.

* the DP's optimum equals every contiguous split and microbatch count priced one by one;
* its objective equals the estimate of what it returns (each stage's strategy estimated afresh);
* a tight budget is respected, and forces more microbatches;
* where the head is large (a big vocabulary) the last stage gets fewer layers; where it is
  small, the split is even.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import optree
import pytest

pytest.importorskip("scipy")

import simshard as ss  # noqa: E402
from simshard.autoshard.candidates import local_bytes  # noqa: E402
from simshard.autoshard.stages import Role, exhaustive_stages, step_of  # noqa: E402
from simshard.ir.program import Aval  # noqa: E402
from simshard.programs import gpt  # noqa: E402
from simshard.programs.gpt_pipeline import (TOPOLOGY, StageCosts, search_pipeline, stage_inputs,  # noqa: E402
                                            sync_estimate)
from simshard.report.pipeline import Pipeline  # noqa: E402
from simshard.report.staged import StageEstimate, StagedPipelineEstimate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import main_in_process  # noqa: E402

CFG = replace(gpt.CONFIGS["tiny"], name="tiny-4", layers=4, batch=8)
MESH = {"pp": 2, "x": 2}
COUNTS = (1, 2, 4)


def program_of(cfg: gpt.Config):
    return replace(gpt.program("tiny"), extras={"config": cfg})


@pytest.fixture(scope="module")
def found():
    return search_pipeline(program_of(CFG), MESH, "pp", microbatches=COUNTS)


def test_the_dp_optimum_equals_every_split_priced_one_by_one(found):
    costs = StageCosts(CFG, ss.Mesh({"x": 2}), 2, "pp", None, TOPOLOGY)  # the searches above, remembered
    best = exhaustive_stages(CFG.layers, 2, COUNTS, costs)
    assert found.plan.seconds == pytest.approx(best.seconds, rel=1e-12)
    assert (found.plan.layers, found.plan.microbatches) == (best.layers, best.microbatches)
    assert found.searches <= 3 * 2 * len(COUNTS)  # one search per (layers, first or last, M)


def test_its_objective_is_the_estimate_of_the_strategies_it_returns(found):
    plan, stages = found.plan, []
    for i, (layers, strategy) in enumerate(zip(plan.layers, found.strategies)):
        sc = replace(CFG, layers=layers, batch=CFG.batch // plan.microbatches)
        args = stage_inputs(sc, last=i == len(plan.layers) - 1)
        n = len(args[0])
        specs = optree.tree_unflatten(optree.tree_structure(args[0]), list(strategy.in_shardings[:n]))
        boundary = local_bytes(strategy.in_shardings[n], Aval(args[1].shape, np.dtype(np.float32)))
        stages.append(StageEstimate(layers, ss.estimate(strategy, *args, topology=TOPOLOGY),
                                    sync_estimate(args[0], specs, ss.Mesh({"x": 2}), TOPOLOGY), boundary))
    est = StagedPipelineEstimate(Pipeline(2, plan.microbatches, "1f1b", "pp"), tuple(stages), TOPOLOGY)
    assert plan.seconds == pytest.approx(est.step_seconds(), rel=1e-12)
    assert found.estimate.step_seconds() == pytest.approx(est.step_seconds(), rel=1e-12)
    assert "bubble" in found.text() and f"{plan.microbatches} microbatches" in found.text()


def test_a_tight_budget_is_respected_and_takes_more_microbatches(found):
    free_peak = max(found.estimate.peak_bytes())
    budget = int(free_peak * 0.9)
    tight = search_pipeline(program_of(CFG), MESH, "pp", microbatches=COUNTS, device_memory=budget, resolve=False)
    assert max(tight.estimate.peak_bytes()) <= budget < free_peak
    assert tight.plan.microbatches > found.plan.microbatches
    assert tight.plan.seconds >= found.plan.seconds


@pytest.mark.parametrize("vocab,split", [(64, (2, 2)), (32768, (3, 1))])
def test_a_large_head_gives_the_last_stage_fewer_layers(vocab, split):
    cfg = replace(CFG, vocab=vocab)
    got = search_pipeline(program_of(cfg), MESH, "pp", microbatches=(4,))
    assert got.plan.layers == split
    costs = StageCosts(cfg, ss.Mesh({"x": 2}), 2, "pp", None, TOPOLOGY)
    even = [costs(2, Role.FIRST, 4, 2), costs(2, Role.LAST, 4, 1)]
    if split != (2, 2):  # the even split: its last stage (the head) paces the pipeline, and costs more
        assert even[1].slot > even[0].slot and step_of(even, 4) > got.plan.seconds


@pytest.mark.parametrize("mesh,axis,kw,match", [({"x": 2, "y": 2}, "pp", {}, "not an axis of the mesh"),
                                                ({"pp": 8, "x": 2}, "pp", {}, "4 layers cannot fill 8"),
                                                (MESH, "pp", {"microbatches": (3,)}, "do not divide the batch"),
                                                (MESH, "pp", {"schedule": "zigzag"}, "schedule")])
def test_bad_input_is_a_clear_error(mesh, axis, kw, match):
    with pytest.raises(ValueError, match=match):
        search_pipeline(program_of(CFG), mesh, axis, **kw)


def test_a_mesh_of_size_one_axes_beside_the_pipeline_axis_is_searched():
    """One device per stage (``x`` of size 1): each stage's strategy is searched, estimated and
    the pipelined step priced (this used to be refused: the partitioner failed on the strategy)."""
    got = search_pipeline(program_of(CFG), {"pp": 2, "x": 1}, "pp", microbatches=(1,))
    assert sum(got.plan.layers) == CFG.layers and len(got.strategies) == 2
    assert got.estimate.step_seconds() == pytest.approx(got.plan.seconds, rel=1e-12) and got.plan.seconds > 0


def test_a_program_without_layers_is_refused():
    from simshard.programs import mlp
    with pytest.raises(ValueError, match="no layer structure"):
        search_pipeline(mlp.PROGRAM, MESH, "pp")


def test_simshard_autoshard_pipeline_prints_the_split_and_the_bubble(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = main_in_process(capsys, "autoshard", "gpt", "--mesh", "pp=2,x=2", "--pipeline", "pp", "--microbatches", "1,2",
                        "--quiet")
    assert r.code == 0, r.err
    assert "2 stages" in r.out and "layers 1 + 1" in r.out and "bubble" in r.out and "sum of slots" in r.out
    assert "stage 0: layers 0..0" in r.out and "stage 1: layers 1..1" in r.out and "params['unembed']" in r.out


@pytest.mark.parametrize("args,match", [(("--mesh", "pp=4,x=2", "--pipeline", "pp"), "2 layers cannot fill 4"),
                                        (("--mesh", "x=2,y=2", "--pipeline", "pp"), "'pp' is not an axis"),
                                        (("--mesh", "pp=2,x=2", "--pipeline", "pp", "--microbatches", "a"),
                                         "--microbatches expects")])
def test_simshard_autoshard_pipeline_bad_input(capsys, args, match):
    r = main_in_process(capsys, "autoshard", "gpt", *args, "--quiet")
    assert r.code == 2 and match in r.err
