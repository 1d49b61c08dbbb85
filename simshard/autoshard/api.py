"""``ss.autoshard``: the strategy of least estimated step time that fits the memory given.

    strategy = ss.autoshard(f, params, x, mesh={"x": 2, "y": 4}, device_memory=2**31)
    print(strategy.report.text())        # the cost breakdown and why each large op is split so
    ss.run(strategy, params, x)           # runs and verifies as any strategy

The function is traced once on the arguments' shapes; every op's candidate strategies are the
assignments of mesh axes to its factors, every input's its tensor-dimension shardings; an
integer program (``model``) joins them by the reshard planner's costs and the memory budget,
and HiGHS solves it. The result is an ``AutoStrategy``: the inputs' and outputs' layouts and
each op's results' layouts, which ``ss.run`` and ``ss.estimate`` take as they take ``ss.jit``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np
import optree

from ..errors import ShardingError
from ..report.compute import device_of
from ..report.estimate import estimate
from ..report.topology import LINK_CLASSES, Topology
from ..sharding.mesh import Mesh
from ..tracing.tracer import ShapeDtype, trace
from .costs import ReshardCosts
from . import incumbent
from .graph import build_graph
from .model import SCALE, Search, chosen
from .report import SearchReport, breakdown, explain, picked
from .strategy import AutoStrategy

DEFAULT_DEVICE = "h100"  # compute is priced on this device where the topology names none
MODES = ("time", "communication")
REPAIRS = 3  # solves again with the model's budget corrected by the estimate's peak (``_fit``)
EXPLAIN_SLACK = 5.0  # each runner-up's solve may take the search's own time and this many seconds more
RAISE, RAISES = 1.25, 4  # where the model fits nothing within the budget: raised so, at most so often (``_solve``)
# under a budget, where no time_limit is given: the seconds the branch and bound may take, and those
# the start's solves may (``_budgeted``); a tight budget makes the relaxation fractional and the
# branch and bound long (minutes on gpt's SGD step): bounded, the result then says its gap
BUDGET_LIMIT, START_LIMIT = 10.0, 120.0
PLANNED_DEVICES = 16  # up to this many devices every reshard is planned; beyond, its closed form


def autoshard(f, *args, mesh, device_memory: int | None = None, topology: Topology | None = None,
              mode: str = "time", ties: Sequence[tuple[int, int]] = (), time_limit: float | None = None,
              explain_top: int = 4, gap: float = 1e-4, planner: bool | None = None) -> AutoStrategy:
    """Search the strategy of ``f(*args)`` on ``mesh`` (module docstring).

    ``args``: arrays or ``ShapeDtype``s. ``device_memory``: the bytes each device may hold (None:
    no limit), checked against the estimate of the strategy found (``_fit``). ``topology``: the
    links (and device) the time is estimated on; default NVLink on every axis and an H100. ``mode``: ``"time"`` minimises
    compute plus communication, ``"communication"`` communication alone. ``ties``: pairs
    (output leaf, input leaf) that must be laid out alike (a training step's parameters written
    back where they were read). ``planner``: price reshards by planning each pair (exact, a few
    milliseconds a pair) or by the planner's structured path in closed form; default: planned up
    to ``PLANNED_DEVICES`` devices. ``gap``: the relative optimality gap the solver may stop at;
    ``time_limit``: seconds each solve may take (then the best strategy found, reported not optimal
    with its gap, and a warning); under a budget, default ``BUDGET_LIMIT`` (``_budgeted``)."""
    if mode not in MODES:
        raise ValueError(f"autoshard: mode is one of {', '.join(MODES)}, not {mode!r}")
    mesh = mesh if isinstance(mesh, Mesh) else Mesh(dict(mesh))
    budget = None if device_memory is None else int(device_memory)
    topology = _topology(topology)
    device = device_of(topology.device)
    if mode == "communication":  # compute priced at (next to) nothing
        device = device_of({"flops": 1e300, "memory_bandwidth": 1e300})
    if budget is not None and budget <= 0:
        raise ValueError(f"autoshard: device_memory is a positive number of bytes, got {device_memory!r}")
    abstract = optree.tree_map(lambda a: ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a, args)
    program = trace(f, *abstract, mesh=mesh)
    costs = ReshardCosts(topology, mesh.size, mesh.size <= PLANNED_DEVICES if planner is None else planner, mesh)
    graph = build_graph(program)
    _check_ties(graph, ties)
    search = Search(graph, mesh, costs, device, budget, ties)
    start = time.perf_counter()
    best, strategy, peak = _fit(search, lambda values: _strategy(f, program, search, values, mesh, None),
                                abstract, topology, budget, time_limit, gap, mode)
    seconds = time.perf_counter() - start
    why = explain(search, best, budget, explain_top, limit=explain_limit(seconds, budget, time_limit, explain_top)) if explain_top else ()
    if not best.optimal:
        warnings.warn(f"autoshard: the search stopped before proving its strategy optimal ({best.status}): "
                      f"it is within {best.gap:.2%} of the best bound proven; pass time_limit (seconds a "
                      "solve may take) to search longer", stacklevel=2)
    report = SearchReport(best.objective / SCALE, breakdown(search, best.values), seconds, search.model.size,
                          search.model.row_count, best.optimal, budget, why, peak, costs.planner, best.gap)
    return replace(strategy, report=report)


def _fit(search: Search, make, abstract, topology: Topology, budget: int | None, time_limit, gap, mode: str):
    """Solve; with a budget, estimate the strategy (``ss.estimate``: the schedules' own buffers,
    which the model approximates) and correct the model's budget by what the estimate says,
    ``REPAIRS`` times at most: while the peak is over, lowered by the excess; where it is under
    (the model counts more than the schedule holds, and may have ruled out a faster strategy
    that fits), raised by the slack, until a strategy goes over. Of those that fit, the one the
    estimate finds fastest; none fitting: the last, and a warning."""
    limit, fits = budget, []
    for _ in range(REPAIRS + 1):
        best, limit = _solve(search, budget, limit, time_limit, gap)
        strategy = make(best.values)
        if budget is None:
            return best, strategy, None
        est = estimate(strategy, *abstract, topology=topology)
        peak = est.memory.max_peak
        if peak <= budget:
            seconds = est.time.total if mode == "communication" else est.step_seconds()
            fits.append((seconds, len(fits), limit, best, strategy, peak))
        elif fits:
            break  # raised past what fits: keep the best that did
        if peak == budget:
            break
        limit += budget - peak
        search.set_budget(limit)
    if fits:
        _, _, limit, best, strategy, peak = min(fits, key=lambda f: f[:2])
        search.set_budget(limit)  # the explanations re-solve around the chosen strategy's model
        return best, strategy, peak
    warnings.warn(f"autoshard: the strategy found needs {peak:,} bytes per device, over device_memory "
                  f"({budget:,}): the memory model misses the schedule's buffers by more than {REPAIRS} "
                  f"corrections could take back", stacklevel=3)
    return best, strategy, peak


def _solve(search: Search, budget: int | None, limit: int | None, time_limit, gap):
    """The optimum under the model's budget ``limit``; where none fits the model but ``budget`` is
    the user's, the model's budget raised by ``RAISE`` up to ``RAISES`` times (the model counts
    more than a schedule holds: a value live to its last reader in program order), since the
    estimate of what it finds is what must fit (``_fit``). Returns the solution and the limit."""
    for _ in range(RAISES):
        try:
            return _budgeted(search, time_limit, gap) if budget is not None else search.model.solve(
                time_limit=time_limit, gap=gap), limit
        except ShardingError as e:
            if budget is None or e.rule != "autoshard-infeasible":
                raise
            limit = int(limit * RAISE)
            search.set_budget(limit)
    return _budgeted(search, time_limit, gap), limit


def explain_limit(seconds: float, budget: int | None, time_limit: float | None, top: int = 1) -> float:
    """Seconds each of ``top`` runner-ups' solves may take: together, the search's own and
    ``EXPLAIN_SLACK`` more, each ``EXPLAIN_SLACK`` at least (a runner-up's solve is as hard as the
    search's: on the 7B step over 8 x 32 x 32 the four took 290 s after a 50 s search, each given
    the search's time); under a budget with no ``time_limit``, no more than a budgeted solve may
    (``BUDGET_LIMIT``), for the same reason. A runner-up stopped so says it, its cost an upper
    bound (``OpExplanation.proven``)."""
    limit = max((seconds + EXPLAIN_SLACK) / max(top, 1), EXPLAIN_SLACK)
    return min(limit, BUDGET_LIMIT) if budget is not None and time_limit is None else limit


def _budgeted(search: Search, time_limit, gap):
    """The budgeted optimum, its branch and bound started from ``incumbent.start``'s solution
    and stopped after ``time_limit`` seconds (``BUDGET_LIMIT`` where None): then its best, not
    optimal, with its gap to the best bound proven (``incumbent.lower_bound``)."""
    first, optimal = incumbent.start(search, time_limit if time_limit is not None else START_LIMIT)
    if optimal:
        return first
    limit = time_limit if time_limit is not None else BUDGET_LIMIT
    best = search.model.solve(time_limit=limit, gap=gap, start=None if first is None else first.values)
    if best.optimal:
        return best
    return replace(best, gap=(best.objective - incumbent.lower_bound(search, best)) / max(best.objective, 1e-300),
                   status=f"stopped after {limit:g} s")


def _check_ties(graph, ties) -> None:
    """Each tie names an output and an input of one shape and dtype (else a ShardingError saying which)."""
    for out, inp in ties:
        if not (0 <= out < len(graph.outputs) and 0 <= inp < len(graph.inputs)):
            raise ShardingError("autoshard-tie", f"tie ({out}, {inp}): the program has {len(graph.outputs)} outputs "
                                f"and {len(graph.inputs)} inputs (leaves, counted from 0)")
        a, b = graph.values[graph.outputs[out]], graph.values[graph.inputs[inp]]
        if a != b:
            raise ShardingError("autoshard-tie", f"tie ({out}, {inp}): output {out} is {a}, input {inp} is {b}; "
                                "only values of one shape and dtype can be laid out alike")


def _topology(topology: Topology | None) -> Topology:
    if topology is None:
        return Topology({}, LINK_CLASSES["nvlink"], device=DEFAULT_DEVICE)
    if topology.default is None and not topology.links:
        raise ShardingError("autoshard-topology", "autoshard needs a link for every mesh axis: the topology has none")
    if topology.device is None:
        return Topology(topology.links, topology.default, topology.nodes, DEFAULT_DEVICE)
    return topology


def _strategy(f, program, search: Search, values, mesh: Mesh, report: SearchReport) -> AutoStrategy:
    ins = tuple(chosen(search.dist[k], values) for k in search.graph.inputs)
    outs = tuple(chosen(d, values) for d in search.output_layouts)
    notes, reads = {}, {}
    for i, op in enumerate(search.ops):
        cand = op.candidates[picked(search, values, i)]
        # pending results annotated too: left open, the partitioner picks the op's candidate by bytes
        # (gpt's x @ wo: an all-to-all and a weight gather, not the contraction split priced)
        notes[(op.site.scope, op.site.index)] = tuple(cand.results)
        held = [None if k is None else chosen(search.dist[k], values) for k in op.site.operands]
        reads[(op.site.scope, op.site.index)] = tuple(None if h is None or t == h or t.unreduced else t
                                                      for h, t in zip(held, cand.operands))
    for scan in search.graph.scans:  # the loop's carries and stacked outputs, laid out as searched
        notes[(scan.scope, scan.index)] = tuple(None if k is None else chosen(search.dist[k], values)
                                                for k in scan.results)
    return AutoStrategy(f, mesh, ins, outs, notes, reads, tuple(program.input_names),
                        tuple(v.aval.shape for v in program.inputs), report)


__all__ = ["AutoStrategy", "autoshard"]
