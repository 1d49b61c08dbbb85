"""``simshard compare PROGRAM``: run several strategies of one program and print them side by
side (verified?, bytes in total and per mesh axis, estimated time, peak memory, collectives),
the cheapest marked (ranked by the program's own cost first where it has one: conv's CKKS
rotations, within each layer); ``--json`` writes the records, ``--plot`` draws bytes and time per strategy;
``--auto`` adds the strategy ``ss.autoshard`` finds as a row named ``auto``."""

from __future__ import annotations

from . import options
from .output import Output
from .plot import plot_strategies, require_matplotlib
from .programs import chosen_mode, estimate_strategy, load_program, run_strategy, strategies
from .summary import document, exit_code, mark_cheapest, summarize, write_json
from .tables import compare_table, program_cost_table


RUN_AUTO_DEVICES = 64  # the auto row runs on meshes up to this size, and is estimated on larger ones


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="run several strategies of a program and compare their cost side by side",
                       description=options.description(__doc__))
    p.add_argument("program", help="a library program (e.g. mlp) or a .py file defining PROGRAM")
    p.add_argument("--strategies", metavar="a,b,c", help="strategies to run, in this order (default: all)")
    p.add_argument("--auto", action="store_true",
                   help="add the strategy ss.autoshard finds (least estimated step time within --device-memory) "
                        f"as a row named auto: run and verified up to {RUN_AUTO_DEVICES} devices, estimated beyond")
    options.add_run_flags(p)
    p.add_argument("--plot", metavar="FILE.png", help="draw bytes and estimated time per strategy (needs simshard[plot])")
    p.set_defaults(execute=execute)


class ActorPool:
    """On the Ray backend, one set of device actors per device set, shared by every strategy that
    runs on it (starting 8 actors takes seconds; the schedules differ per strategy, the actors
    need not). On the local backend, nothing."""

    def __init__(self, backend: str, address: str | None, devices_per_process: int | None = None,
                 node_axes: tuple[str, ...] | None = None):
        self.backend, self.address, self.meshes = backend, address, {}
        self.per_process = devices_per_process  # None: RayMesh's default
        self.node_axes = node_axes  # mesh axes whose coordinates a node's devices share (None: no plan)

    def get(self, mesh):
        if self.backend != "ray":
            return None
        key = tuple(mesh.device_ids) if self.node_axes is None else (mesh.axis_names, mesh.axis_sizes, mesh.device_ids)
        if key not in self.meshes:
            from simshard.runtime.ray.driver.mesh import RayMesh  # ray only for the Ray backend

            if self.node_axes is None:
                self.meshes[key] = RayMesh(devices=key, address=self.address, devices_per_process=self.per_process)
            else:  # planned onto nodes by the mesh's axes
                self.meshes[key] = RayMesh(mesh, address=self.address, node_axes=self.node_axes,
                                           devices_per_process=self.per_process)
        return self.meshes[key]

    def __enter__(self) -> "ActorPool":
        return self

    def __exit__(self, *exc) -> None:
        for m in self.meshes.values():
            m.close()


def execute(args, out: Output) -> int:
    if args.plot:
        require_matplotlib()  # before anything runs
    mesh = options.parse_mesh(args.mesh) if args.mesh else None
    backend = options.backend(args)
    program = load_program(args.program)
    chosen = strategies(program, args.strategies)
    mode = chosen_mode(program, args.mode, program.default_mode)
    forward_only = []
    if mode != "forward" and args.strategies is None:  # all of them: those with a training step
        forward_only = [s.name for s in chosen if not program.training.trains(s)]
        chosen = [s for s in chosen if program.training.trains(s)]
    meshes = [program.mesh_for(s, mesh) for s in chosen]
    topology = options.topology(args.topology, args.bandwidth, args.latency, [a for m in meshes for a in m.axis_names])
    if args.auto:
        chosen.append(program.auto(device_memory=args.device_memory, topology=topology))
        meshes.append(program.mesh_for(chosen[-1], mesh))
    outcomes = []
    estimated = options.estimating(args)
    pool = ActorPool("none" if estimated else backend, args.address, args.devices_per_process, args.node_axes)
    with out.steps(f"{program.name} {'estimated' if estimated else 'on ' + backend}", len(chosen)) as advance, pool:
        for s, m in zip(chosen, meshes):
            advance(s.name)
            if estimated or (s.search is not None and m.size > RUN_AUTO_DEVICES):
                outcomes.append(estimate_strategy(program, s, mesh, mode))
                continue
            outcomes.append(run_strategy(program, s, mesh, backend, args.address, args.device_memory,
                                         progress=lambda stage, name=s.name: advance(f"{name}: {stage}", count=False),
                                         ray_mesh=pool.get(m), algorithm=args.algorithm, mode=mode))
    summaries = mark_cheapest([summarize(o, topology, args.exact, program.cost_of(o.strategy, o.mesh), args.device_memory)
                               for o in outcomes])

    out.heading(program.name, program.about)
    out.line(f"{len(chosen)} strategies, " + ("estimated without running" if estimated else f"backend {backend}"))
    out.line(f"mode {mode}: {program.describe_mode(mode)}"
             + (" (--mode forward for the forward pass only)" if mode != "forward" else ""))
    if forward_only:
        out.line(f"not shown, forward pass only: {', '.join(forward_only)}")
    out.line(f"topology {options.describe_topology(topology)}")
    out.print(compare_table(summaries))
    own = program_cost_table(summaries)
    if own is not None:
        out.print(own)
    for s in summaries:
        if s.error is not None or not (s.verified or s.estimated):
            out.line(f"{s.name}: {s.error or s.first_divergence}")
        elif s.estimated:
            out.line(f"{s.name}: {s.memory_verdict}" + (f"; {s.idle}" if s.idle else ""))
    if args.json:
        write_json(args.json, document("compare", program, mesh, "none" if estimated else backend, topology,
                                       args.exact, summaries, mode))
    if args.plot:
        plot_strategies(args.plot, program.name, summaries)
        out.line(f"plot written to {args.plot}")
    return exit_code(summaries)
