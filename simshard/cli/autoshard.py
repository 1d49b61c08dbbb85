"""``simshard autoshard PROGRAM``: search a program's strategy with ``ss.autoshard`` (least estimated
step time within ``--device-memory`` per device) and print it (PartitionSpecs, DTensor placements,
Shardy text), the cost breakdown and why each large op is split as it is; then run and verify it,
or with ``--estimate`` cost it from its schedules (``ss.estimate``) on a mesh of any size. With
``--pipeline AXIS`` (gpt), Alpa's inter-op search over that axis instead (``cli/pipeline.py``)."""

from __future__ import annotations

from . import options, pipeline
from .output import Output
from .programs import chosen_mode, estimate_strategy, load_program, run_strategy
from .summary import document, exit_code, mark_cheapest, summarize, write_json
from .tables import compare_table


def add_parser(sub) -> None:
    p = sub.add_parser("autoshard", help="search a program's cheapest strategy (ss.autoshard), print it and run it",
                       description=options.description(__doc__))
    p.add_argument("program", help="a library program (e.g. mlp) or a .py file defining PROGRAM")
    options.add_run_flags(p)
    p.add_argument("--time-limit", metavar="SECONDS", type=float, default=None,
                   help="stop the solver after this long with the best strategy found (reported not optimal)")
    pipeline.add_flags(p)
    p.set_defaults(execute=execute)


def execute(args, out: Output) -> int:
    mesh = options.parse_mesh(args.mesh) if args.mesh else None
    program = load_program(args.program)
    mode = chosen_mode(program, args.mode, program.default_mode)
    used = program.mesh_for(None, mesh)
    topology = options.topology(args.topology, args.bandwidth, args.latency, used.axis_names)
    if args.pipeline is not None:
        return pipeline.execute(args, out, program, mesh, topology)
    auto = program.auto(device_memory=args.device_memory, topology=topology, time_limit=args.time_limit)
    with out.spinner(f"{program.name}: searching") as stage:
        found = auto.search(used, mode)
        stage("estimating" if args.estimate else "running")
        if args.estimate:
            outcome = estimate_strategy(program, auto, used, mode)
        else:
            outcome = run_strategy(program, auto, used, options.backend(args), args.address, args.device_memory,
                                   progress=stage, algorithm=args.algorithm, mode=mode,
                                   devices_per_process=args.devices_per_process)
    out.heading(f"{program.name} / auto", auto.about)
    out.line(f"mesh {', '.join(f'{a}={n}' for a, n in used.shape.items())} ({used.size} devices), mode {mode}, "
             f"topology {options.describe_topology(topology)}")
    out.line("inputs: PartitionSpec, DTensor placements, Shardy")
    out.line(found.show())
    out.line(found.report.text())
    summary = mark_cheapest([summarize(outcome, topology, args.exact)])
    out.print(compare_table(summary))
    if summary[0].error is not None or not (summary[0].verified or summary[0].estimated):
        out.line(f"auto: {summary[0].error or summary[0].first_divergence}")
    if args.json:
        write_json(args.json, document("estimate" if args.estimate else "run", program, mesh,
                                       "none" if args.estimate else options.backend(args), topology, args.exact,
                                       summary, mode))
    return exit_code(summary)
