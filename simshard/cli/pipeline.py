"""``simshard autoshard gpt --mesh pp=4,x=2,y=2 --pipeline pp [--microbatches 4,8] [--schedule 1f1b]
[--config 7b]``: Alpa's inter-op search (``programs/gpt_pipeline.py``): the layers split into
contiguous stages over the pipeline axis, the microbatch count, and each stage's strategy found
by ``ss.autoshard`` on the rest of the mesh; printed with the step's cost breakdown (the bubble
included). A pipelined step is estimated, not run."""

from __future__ import annotations

import dataclasses

from simshard.programs import gpt
from simshard.programs.gpt_pipeline import search_pipeline
from simshard.report.pipeline import SCHEDULES

from . import options
from .errors import UsageError
from .output import Output


def add_flags(p) -> None:
    g = p.add_argument_group("pipeline (gpt)")
    g.add_argument("--pipeline", metavar="AXIS", help="search a pipeline over this mesh axis: stages, microbatches and "
                   "each stage's strategy (Alpa's inter-op DP; estimated, not run)")
    g.add_argument("--microbatches", metavar="M1,M2", help="with --pipeline: the microbatch counts to try (default: "
                   "every divisor of the batch)")
    g.add_argument("--schedule", choices=SCHEDULES, default="1f1b", help="with --pipeline: the pipeline schedule")
    g.add_argument("--config", choices=tuple(gpt.CONFIGS), default=None,
                   help="with --pipeline: the gpt configuration (default: the program's)")


def _counts(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise UsageError(f"--microbatches expects counts like 4,8,16, got {text!r}") from None


def execute(args, out: Output, program, mesh, topology) -> int:
    """Search and print the pipeline (module docstring)."""
    if mesh is None:
        raise UsageError("--pipeline needs --mesh naming the pipeline axis, e.g. --mesh pp=4,x=2,y=2 --pipeline pp")
    if args.config is not None:
        if not isinstance(program.extras.get("config"), gpt.Config):
            raise UsageError(f"--config names a gpt configuration; program {program.name!r} is not gpt")
        program = dataclasses.replace(program, name=f"gpt-{args.config}", extras={"config": gpt.CONFIGS[args.config]})
    try:
        with out.spinner(f"{program.name}: searching the pipeline"):
            found = search_pipeline(program, mesh, args.pipeline, device_memory=args.device_memory,
                                    topology=topology, microbatches=_counts(args.microbatches),
                                    schedule=args.schedule, time_limit=args.time_limit)
    except ValueError as e:
        raise UsageError(f"autoshard --pipeline {args.pipeline}: {e}") from None
    out.heading(f"{program.name} / auto pipeline", "Alpa's inter-op DP over stages, ss.autoshard inside each stage")
    out.line(f"mesh {', '.join(f'{a}={n}' for a, n in mesh.shape.items())} ({mesh.size} devices), topology "
             f"{options.describe_topology(topology)}")
    out.line(found.text())
    return 0
