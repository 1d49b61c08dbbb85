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
from typing import Mapping, Sequence

import numpy as np
import optree

from ..errors import ShardingError
from ..report.compute import device_of
from ..report.topology import LINK_CLASSES, Topology
from ..sharding.mesh import Mesh
from ..tracing.tracer import ShapeDtype, trace
from .costs import ReshardCosts
from .graph import build_graph
from .model import Search, chosen
from .report import SearchReport, breakdown, explain
from .strategy import AutoStrategy

DEFAULT_DEVICE = "h100"  # compute is priced on this device where the topology names none
MODES = ("time", "communication")


def autoshard(f, *args, mesh, device_memory: int | None = None, topology: Topology | None = None,
              mode: str = "time", ties: Sequence[tuple[int, int]] = (), time_limit: float | None = None,
              explain_top: int = 6, gap: float = 1e-4) -> AutoStrategy:
    """Search the strategy of ``f(*args)`` on ``mesh`` (module docstring).

    ``args``: arrays or ``ShapeDtype``s. ``device_memory``: the bytes each device may hold, None for no limit. ``topology``: the links (and device) the time is
    estimated on; default NVLink on every axis and an H100. ``mode``: ``"time"`` minimises
    compute plus communication, ``"communication"`` communication alone. ``ties``: pairs
    (output leaf, input leaf) that must be laid out alike (a training step's parameters written
    back where they were read)."""
    if mode not in MODES:
        raise ValueError(f"autoshard: mode is one of {', '.join(MODES)}, not {mode!r}")
    mesh = mesh if isinstance(mesh, Mesh) else Mesh(dict(mesh))
    budget = None if device_memory is None else int(device_memory)
    topology = _topology(topology)
    device = device_of(topology.device)
    if mode == "communication":
        device = device_of({"flops": 1e300, "memory_bandwidth": 1e300})
    abstract = optree.tree_map(lambda a: ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a, args)
    program = trace(f, *abstract, mesh=mesh)
    graph = build_graph(program)
    search = Search(graph, mesh, ReshardCosts(topology), device, budget, ties)
    start = time.perf_counter()
    best = search.model.solve(time_limit=time_limit, gap=gap)
    solve_seconds = time.perf_counter() - start
    report = SearchReport(best.objective / 1e6, breakdown(search, best.values), solve_seconds, search.model.size,
                          search.model.row_count, best.optimal, budget,
                          explain(search, best, budget, explain_top) if explain_top else ())
    return _strategy(f, program, search, best.values, mesh, report)


def _topology(topology: Topology | None) -> Topology:
    if topology is None:
        return Topology({}, LINK_CLASSES["nvlink"], device=DEFAULT_DEVICE)
    if topology.default is None and not topology.links:
        raise ShardingError("autoshard-topology", "autoshard needs a link for every mesh axis: the topology has none")
    if topology.device is None:
        return Topology(topology.links, topology.default, topology.nodes, DEFAULT_DEVICE)
    return topology


def _strategy(f, program, search: Search, values, mesh: Mesh, report: SearchReport) -> AutoStrategy:
    graph = search.graph
    ins = tuple(chosen(search.dist[k], values) for k in graph.inputs)
    outs = tuple(chosen(d, values) for d in search.output_layouts)
    notes = {}
    for i, op in enumerate(search.ops):
        c = max(range(len(op.vars)), key=lambda c: values[op.vars[c]])
        notes[(op.site.scope, op.site.index)] = tuple(None if s.unreduced else s for s in op.candidates[c].results)
    return AutoStrategy(f, mesh, ins, outs, notes, tuple(program.input_names),
                        tuple(v.aval.shape for v in program.inputs), report)


__all__ = ["AutoStrategy", "autoshard"]
