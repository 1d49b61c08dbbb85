"""``simshard explain PROGRAM``: the propagated program of one strategy, each value's type
string (``f32[16@x,64@y]``), and per value why it got its sharding: which annotation, with which
priority, reached it through which ops and factors (``simshard.propagate.explain``). Nothing
runs: the program is only traced and propagated."""

from __future__ import annotations

from simshard.propagate import explain, propagation_info

from . import options
from .errors import EXIT_OK, UsageError
from .output import Output
from .programs import load_program, propagated


def add_parser(sub) -> None:
    p = sub.add_parser("explain", help="show a strategy's propagated shardings and why each value got its own",
                       description=options.description(__doc__))
    p.add_argument("program", help="a library program (e.g. mlp) or a .py file defining PROGRAM")
    p.add_argument("--strategy", "-s", help="the strategy (default: the program's first)")
    p.add_argument("--mesh", metavar="x=2,y=4", help="mesh axes and sizes (default: the strategy's or program's mesh)")
    p.add_argument("--value", action="append", metavar="NAME",
                   help="explain only this value: an input name, a label or an output index (repeatable)")
    p.set_defaults(execute=execute)


def execute(args, out: Output) -> int:
    mesh = options.parse_mesh(args.mesh) if args.mesh else None
    program = load_program(args.program)
    strategy = program.strategy(args.strategy)
    prog, used = propagated(program, strategy, mesh)
    values = prog.values() if not args.value else [_lookup(prog, v) for v in args.value]
    mesh_text = ", ".join(f"{a}={n}" for a, n in used.shape.items())
    out.heading(f"{program.name} / {strategy.name}", strategy.about)
    propagated_here = propagation_info(prog) is not None
    out.line(f"mesh {mesh_text}, mode {prog.mode}" + (f", propagation {strategy.propagation}" if propagated_here else "")
             + "\n")
    out.line(prog.pretty())
    if not propagated_here:
        out.line("\nexplicit mode (sharding in types): each op's rule computed its result's sharding at trace "
                 "time from its operands'; nothing was propagated.")
        return EXIT_OK
    out.print("\n[bold]why each value has its sharding[/]")
    for v in values:
        out.line(explain(prog, v))
    return EXIT_OK


def _lookup(prog, key: str):
    try:
        return prog.lookup(int(key) if key.lstrip("-").isdigit() else key)
    except (KeyError, IndexError):
        named = [n for n, _ in prog.labels] + list(prog.input_names)
        raise UsageError(f"--value {key!r}: no such value (named values: {', '.join(named) or 'none'}; "
                         f"outputs 0..{len(prog.outputs) - 1})") from None
