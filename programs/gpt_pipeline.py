"""The ``gpt`` program's pipeline search: Alpa's inter-op DP (``autoshard.stages``) over the
layers, with each stage's strategy found by ``ss.autoshard`` on the rest of the mesh.

    found = search_pipeline(gpt.program("7b"), ss.Mesh({"pp": 8, "x": 32, "y": 32}), "pp")
    print(found.text())                  # the split, M, each stage's strategy, the step and its bubble

A stage of ``k`` layers runs, per microbatch (``B / M`` sequences), its layers' forward (in a
scan: one search for any ``k``) and backward from the gradient the next stage returns; the last
stage also the final LayerNorm, the vocabulary projection and the loss. Its gradients are
returned where its parameters are (``ties``), so the search prices their data-parallel
reduction every microbatch: an upper bound on a pipeline that accumulates them and reduces once
per step (the search's outputs cannot stay pending). Once per step each stage runs the SGD
update (``sync``). The model has no embedding lookup (its input is the embedded stream), so the
first stage's program is a middle one; only its memory differs (it holds more microbatches).

Each distinct stage (layer count, role, ``M``) is searched once without a budget; where it
does not fit the budget with the microbatches its position holds, once more under the budget
divided by them (a microbatch's peak within ``budget / held`` keeps the stage within the
budget), and left out if that does not fit either.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import optree

import simshard as ss
from simshard.autoshard import AutoStrategy, autoshard
from simshard.autoshard.candidates import local_bytes
from simshard.autoshard.stages import Role, StageCost, StagePlan, plan_stages
from simshard.errors import ShardingError
from simshard.ir.program import Aval
from simshard.report.pipeline import Pipeline, SCHEDULES
from simshard.report.staged import (StageEstimate, StagedPipelineEstimate, estimate_seconds, stage_bytes,
                                    transfer_seconds)
from simshard.sharding.mesh import Mesh

from .gpt import Config, stage_layers_scan, stage_loss
from .training import LR

TOPOLOGY = ss.Topology({}, "nvlink", device="h100")  # as autoshard's default: NVLink everywhere, an H100
_SEARCHED: dict = {}  # the stage searches made, per program, inner mesh, topology and options (remembered)


@dataclass(frozen=True)
class StageSearch:
    """One searched stage program: its strategy, the estimate of a microbatch and of the sync."""

    strategy: AutoStrategy
    microbatch: ss.Estimate
    sync: ss.Estimate
    boundary_bytes: int


def stage_function(cfg: Config, last: bool):
    """``f(params, x, ct_or_y) -> (d params, d x)``: one microbatch through a stage of ``cfg.layers``
    layers and back (module docstring)."""

    def middle(params, x, ct):
        _, pull = ss.vjp(lambda p, h: stage_layers_scan(cfg, p, h), params, x)
        return pull(ct)

    def end(params, x, y):
        _, pull = ss.vjp(lambda p, h: stage_loss(cfg, p, h, y), params, x)
        return pull(np.float32(1.0))

    return end if last else middle


def stage_inputs(cfg: Config, last: bool) -> tuple:
    shapes = dict(cfg.layer_params) | ({"unembed": (cfg.d, cfg.vocab)} if last else {})
    params = {k: ss.ShapeDtype(s, np.float32) for k, s in shapes.items()}
    act = ss.ShapeDtype((cfg.batch, cfg.seq, cfg.d), np.float32)
    other = ss.ShapeDtype((cfg.batch, cfg.seq, cfg.vocab), np.float32) if last else act
    return params, act, other


def sync_estimate(params: dict, specs: dict, inner: Mesh, topology: ss.Topology) -> ss.Estimate:
    """A stage's once-per-step work: the SGD update of its parameters, laid out as ``specs``."""
    return ss.estimate(lambda g, p: optree.tree_map(lambda w, d: w - LR * d, p, g), params, params, mesh=inner,
                       in_shardings=(specs, specs), out_shardings=specs, topology=topology)


class StageCosts:
    """The ``StageCostFn`` of the DP for one program, mesh and budget (module docstring), caching
    each stage program's searches."""

    def __init__(self, cfg: Config, inner: Mesh, stages: int, axis: str, budget: int | None, topology: ss.Topology,
                 resolve: bool = True, **options):
        self.cfg, self.inner, self.stages, self.axis = cfg, inner, stages, axis
        self.budget, self.topology, self.resolve, self.options = budget, topology, resolve, options
        # (layers, last, M, budget) -> its search; shared by every StageCosts of one program, mesh and topology
        key = (cfg, inner, repr(topology), tuple(sorted(options.items())))
        self.searched: dict[tuple, StageSearch | None] = _SEARCHED.setdefault(key, {})
        self.asked: set[tuple] = set()  # the searches this one used

    def __call__(self, layers: int, role: Role, microbatches: int, held: int) -> StageCost | None:
        last = role in (Role.LAST, Role.ONLY)
        key = (layers, last, microbatches)
        free = self.search(key, None)
        if self.budget is None or stage_bytes(free.microbatch, held) <= self.budget:
            return self.cost(free, held)
        if not self.resolve:
            return None
        tight = self.search(key, self.budget // held)
        return None if tight is None or stage_bytes(tight.microbatch, held) > self.budget else self.cost(tight, held)

    def cost(self, found: StageSearch, held: int) -> StageCost:
        slot = estimate_seconds(found.microbatch, self.topology) + transfer_seconds(
            self.topology, self.axis, self.stages, found.boundary_bytes)
        return StageCost(slot, estimate_seconds(found.sync, self.topology), stage_bytes(found.microbatch, held), found)

    def search(self, key: tuple, budget: int | None) -> StageSearch | None:
        self.asked.add((key, budget))
        if (key, budget) not in self.searched:
            self.searched[key, budget] = self._search(*key, budget)
        return self.searched[key, budget]

    def _search(self, layers: int, last: bool, microbatches: int, budget: int | None) -> StageSearch | None:
        c = self.cfg
        sc = Config(f"{c.name}-stage{layers}", layers, c.d, c.heads, c.d_ff, c.vocab, c.seq, c.batch // microbatches)
        args = stage_inputs(sc, last)
        n = len(args[0])
        ties = tuple((i, i) for i in range(n + 1))  # gradients where their parameters are, d x where x is
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # over the budget: checked here, by the estimate
                found = autoshard(stage_function(sc, last), *args, mesh=self.inner, device_memory=budget,
                                  topology=self.topology, ties=ties, explain_top=0, **self.options)
        except ShardingError:
            if budget is None:
                raise
            return None  # nothing fits this budget
        microbatch = ss.estimate(found, *args, topology=self.topology)
        specs = found.in_shardings[:n]
        params = args[0]
        tree = optree.tree_structure(params)
        sync = sync_estimate(params, optree.tree_unflatten(tree, list(specs)), self.inner, self.topology)
        x = args[1]
        boundary = local_bytes(found.in_shardings[n], Aval(x.shape, np.dtype(x.dtype)))
        return StageSearch(found, microbatch, sync, boundary)


@dataclass(frozen=True)
class PipelineStrategy:
    """What the pipeline search found: the plan (split, ``M``, costs), each stage's strategy, and
    the estimate of the pipelined step built from the stages' own estimates."""

    plan: StagePlan
    estimate: StagedPipelineEstimate
    strategies: tuple[AutoStrategy, ...] = field(repr=False)
    searches: int = 0  # the intra-op searches it took

    def text(self) -> str:
        """The split, ``M``, each stage's strategy and the cost breakdown, bubble included."""
        est, p = self.estimate, self.estimate.pipeline
        slots, syncs, peaks = est.slot_seconds(), est.sync_seconds(), est.peak_bytes()
        lines = [f"pipeline over {p.axis!r}: {p.stages} stages, {p.microbatches} microbatches ({p.schedule}), layers "
                 f"{' + '.join(str(n) for n in self.plan.layers)}; {self.searches} intra-op searches",
                 f"step {est.step_seconds() * 1e3:.4f} ms = sum of slots {sum(slots) * 1e3:.4f} + "
                 f"({p.microbatches} - 1) x slowest slot {max(slots) * 1e3:.4f} + sync {max(syncs) * 1e3:.4f}; "
                 f"bubble {est.bubble_seconds() * 1e3:.4f} ms"]
        start = 0
        for i, (st, strategy) in enumerate(zip(est.stages, self.strategies)):
            lines.append(f"stage {i}: layers {start}..{start + st.layers - 1}, slot {slots[i] * 1e3:.4f} ms, sync "
                         f"{syncs[i] * 1e3:.4f} ms, peak {peaks[i]:,} bytes per device")
            lines.extend("    " + line for line in strategy.show().splitlines())
            start += st.layers
        return "\n".join(lines)


def microbatch_counts(cfg: Config) -> tuple[int, ...]:
    """Every divisor of the batch."""
    return tuple(m for m in range(1, cfg.batch + 1) if cfg.batch % m == 0)


def search_pipeline(program, mesh: Mesh | dict, axis: str, device_memory: int | None = None,
                    topology: ss.Topology | None = None, microbatches=None, schedule: str = "1f1b",
                    resolve: bool = True, **options) -> PipelineStrategy:
    """Alpa's inter-op search of a ``gpt`` program over the mesh's ``axis`` (module docstring).

    ``microbatches``: the counts to try (default: every divisor of the batch). ``resolve``: where
    a stage's strategy found without a budget does not fit ``device_memory``, search it again
    under the budget (else leave that stage out: faster, as a budgeted search is a branch and
    bound). ``options`` go to every stage's ``ss.autoshard``."""
    cfg = program.extras.get("config") if program.extras else None
    if not isinstance(cfg, Config):
        raise ValueError(f"program {program.name!r} has no layer structure to pipeline (only the gpt programs do)")
    mesh = mesh if isinstance(mesh, Mesh) else Mesh(dict(mesh))
    if axis not in mesh.shape:
        raise ValueError(f"the pipeline axis {axis!r} is not an axis of the mesh ({', '.join(mesh.axis_names)})")
    if schedule not in SCHEDULES:
        raise ValueError(f"pipeline schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    stages = mesh.shape[axis]
    counts = microbatch_counts(cfg) if microbatches is None else tuple(microbatches)
    bad = [m for m in counts if m < 1 or cfg.batch % m]
    if bad:
        raise ValueError(f"microbatch counts {bad} do not divide the batch of {cfg.batch}")
    # each stage is searched on the rest of the mesh; a size-1 axis splits nothing, so it is left out
    # of the search (a mesh of size-1 axes beside the pipeline axis: one device per stage)
    rest = {a: n for a, n in mesh.shape.items() if a != axis and n > 1}
    inner = Mesh(rest or {a: n for a, n in mesh.shape.items() if a != axis} or {"x": 1})
    if topology is None:
        topology = TOPOLOGY
    elif topology.device is None:  # priced on autoshard's device where the topology names none
        topology = ss.Topology(topology.links, topology.default, topology.nodes, TOPOLOGY.device)
    costs = StageCosts(cfg, inner, stages, axis, device_memory, topology, resolve, **options)
    plan = plan_stages(cfg.layers, stages, counts, costs, schedule, device_memory)
    found = [c.strategy for c in plan.costs]
    estimate = StagedPipelineEstimate(
        Pipeline(stages, plan.microbatches, schedule, axis),
        tuple(StageEstimate(n, f.microbatch, f.sync, f.boundary_bytes) for n, f in zip(plan.layers, found)),
        topology)
    return PipelineStrategy(plan, estimate, tuple(f.strategy for f in found), len(costs.asked))


__all__ = ["PipelineStrategy", "StageCosts", "microbatch_counts", "search_pipeline", "stage_function", "stage_inputs",
           "sync_estimate"]
