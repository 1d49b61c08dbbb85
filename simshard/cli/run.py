"""``simshard run PROGRAM``: run one strategy, verify it, and report its communication (per op,
collective and mesh axes, bytes beside the analytic minimum, estimated time) and its peak memory
per device; ``--json`` / ``--trace`` write the same as JSON and as a Chrome trace.

``simshard estimate PROGRAM`` (or ``run --estimate``) reports the same communication and memory
without running: from the partitioned schedules alone (``ss.estimate``), on meshes of any size."""

from __future__ import annotations

from simshard.report.trace_export import write_chrome_trace

from . import options, training
from .errors import UsageError
from .output import Output
from .programs import chosen_mode, estimate_strategy, load_program, run_strategy
from .summary import document, exit_code, mark_cheapest, summarize, write_json
from .tables import comm_table, memory_table, step_lines, verdict


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run one strategy of a program: verify it, report communication and memory",
                       description=options.description(__doc__))
    p.add_argument("program", help="a library program (e.g. mlp) or a .py file defining PROGRAM")
    p.add_argument("--strategy", "-s", help="the strategy to run (default: the program's first)")
    options.add_run_flags(p)
    p.add_argument("--trace", metavar="FILE", help="write the collectives as a Chrome trace (chrome://tracing, Perfetto)")
    p.set_defaults(execute=execute)
    e = sub.add_parser("estimate", help="cost one strategy without running it: the communication and memory a run "
                       "would record, on a mesh of any size", description=options.description(__doc__))
    e.add_argument("program", help="a library program (e.g. mlp) or a .py file defining PROGRAM")
    e.add_argument("--strategy", "-s", help="the strategy to cost (default: the program's first)")
    options.add_run_flags(e)
    e.add_argument("--trace", metavar="FILE", help="write the collectives as a Chrome trace (chrome://tracing, Perfetto)")
    training.add_flags(e)
    e.set_defaults(execute=execute, estimate=True)


def execute(args, out: Output) -> int:
    if training.wanted(args):  # estimate gpt --config ... --parallel ...: the analytic step
        return training.execute(args, out)
    mesh = options.parse_mesh(args.mesh) if args.mesh else None
    backend = options.backend(args)
    program = load_program(args.program)
    strategy = program.strategy(args.strategy)
    mode = chosen_mode(program, args.mode)
    used = program.mesh_for(strategy, mesh)
    topology = options.topology(args.topology, args.bandwidth, args.latency, used.axis_names)
    estimated = options.estimating(args)
    with out.spinner(f"{program.name}/{strategy.name}") as stage:
        if estimated:
            outcome = estimate_strategy(program, strategy, mesh, mode)
        else:
            outcome = run_strategy(program, strategy, mesh, backend, args.address, args.device_memory,
                                   progress=stage, algorithm=args.algorithm, mode=mode,
                                   devices_per_process=args.devices_per_process, node_axes=args.node_axes)
    summary = mark_cheapest([summarize(outcome, topology, args.exact, device_memory=args.device_memory)])[0]
    res = outcome.result

    mesh_text = ", ".join(f"{a}={n}" for a, n in used.shape.items())
    out.heading(f"{program.name} / {strategy.name}", strategy.about)
    execution = getattr(res, "execution", None)
    plane = getattr(execution, "data_plane", None)
    # what went where: messages per route taken, device pairs per route, the run calls (a fallback shows)
    routes = execution.describe_routes() if plane else None
    if estimated:
        out.line(f"mesh {mesh_text} ({used.size} devices), estimated without running")
    else:
        out.line(f"mesh {mesh_text} ({used.size} devices), backend {backend}"
                 + (f" (data plane: {plane}; {routes})" if plane else ""))
    if mode != "forward":
        out.line(f"mode {mode}: {program.describe_mode(mode)}")
    out.line(f"topology {options.describe_topology(topology)}")
    out.print(verdict(summary, res, args.exact))
    for line in step_lines(summary):
        out.line(line)
    if res is not None:
        if res.comm.total_records:
            out.print(comm_table(res.comm, topology))
        else:
            out.line("communication: none (no collectives)")
        out.print(memory_table(res.memory))
    if args.json:
        write_json(args.json, document("estimate" if estimated else "run", program, mesh,
                                       "none" if estimated else backend, topology, args.exact, [summary], mode))
    if args.trace:
        if res is None:
            raise UsageError("--trace: the run produced no communication report (it did not finish, or its outputs "
                             "did not assemble)")
        try:
            write_chrome_trace(args.trace, res.comm, topology, name=f"{program.name}/{strategy.name} (estimated)",
                               metadata={"program": program.name, "strategy": strategy.name, "mesh": dict(used.shape)},
                               timeline=getattr(res.execution, "timeline", None))
        except OSError as e:
            raise UsageError(f"--trace: cannot write {args.trace!r}: {e.strerror}") from None
    return exit_code([summary])
