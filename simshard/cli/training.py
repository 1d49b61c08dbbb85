"""``simshard estimate gpt --config ... --parallel tp=T,pp=P,dp=D --batch B --device a100``: a GPT
training step from numbers, on a cluster of any size, without tracing (report/training): its step
time, Megatron's model FLOP/s per device and its peak memory per device. Options left out are
chosen as a tuned run would (the fastest that fits in memory) and the report says which.
"""

from __future__ import annotations

from simshard.programs.gpt import CONFIGS
from simshard.report.devices import DEVICE_CLASSES
from simshard.report.topology import Nodes, Topology
from simshard.report.training import CLUSTERS, Parallel, Schedule, Transformer, cluster, model_flops
from simshard.report.training.tune import tune
from simshard.units import fmt_bytes, fmt_seconds

from .errors import EXIT_OK, UsageError
from .options import read_topology_file
from .output import Output
from .summary import write_json

CONFIG_KEYS = {"layers": "layers", "hidden": "hidden", "heads": "heads", "vocab": "vocab", "seq": "seq", "ffn": "ffn"}
DEFAULT_CLUSTER = {"a100": "dgx-a100", "a100-40gb": "dgx-a100", "h100": "dgx-h100", "h200": "dgx-h100"}


def add_flags(parser) -> None:
    g = parser.add_argument_group("a GPT training step from numbers (program gpt; docs/estimate.md)")
    g.add_argument("--config", metavar="layers=L,hidden=H,heads=A,vocab=V,seq=S",
                   help="the model's sizes (ffn=F optional, default 4H), or a library configuration: "
                        "tiny, gpt2-small, 7b")
    g.add_argument("--parallel", metavar="tp=T,pp=P,dp=D", help="tensor, pipeline and data parallel sizes")
    g.add_argument("--batch", type=int, metavar="B", help="sequences per step (default: the library configuration's)")
    g.add_argument("--device", choices=sorted(DEVICE_CLASSES), help="the device class (default a100)")
    g.add_argument("--nodes", type=int, metavar="N", help="nodes the devices are spread over (default: 8 a node)")
    g.add_argument("--microbatch", type=int, metavar="b", help="sequences per microbatch (default: tuned)")
    g.add_argument("--schedule", metavar="1f1b|interleaved:V", help="pipeline schedule (default: tuned)")
    g.add_argument("--recompute", choices=("none", "selective", "full"), help="activation recomputation (default: tuned)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage; 3 is FSDP (default: tuned)")
    g.add_argument("--sequence-parallel", choices=("on", "off"), help="sequence parallelism (default: tuned)")
    g.add_argument("--attention", choices=("flash", "unfused"), default="flash", help="attention kernel (default flash)")
    g.add_argument("--grad-accumulation", choices=("fused", "unfused"), default="fused",
                   help="weight gradients accumulated in float32 by their matmuls (fused, default) or by an add")


def wanted(args) -> bool:
    """Whether the command line asks for the analytic GPT step."""
    return getattr(args, "parallel", None) is not None or getattr(args, "config", None) is not None


def parse_config(text: str | None) -> tuple[Transformer, int | None]:
    """``--config``: ``key=value`` sizes or a library name; the model and its default batch."""
    if text is None:
        raise UsageError("estimate gpt: give --config layers=L,hidden=H,heads=A,vocab=V,seq=S (or a library name)")
    if "=" not in text:
        if text not in CONFIGS:
            raise UsageError(f"--config {text!r}: not a library configuration (known: {', '.join(CONFIGS)})")
        c = CONFIGS[text]
        return Transformer(c.layers, c.d, c.heads, c.vocab, c.seq, c.d_ff, name=text), c.batch
    sizes = _pairs(text, "--config", CONFIG_KEYS)
    missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq") if k not in sizes]
    if missing:
        raise UsageError(f"--config {text!r}: missing {', '.join(missing)}")
    try:
        return Transformer(**sizes), None
    except ValueError as e:
        raise UsageError(f"--config {text!r}: {e}") from None


def parse_parallel(text: str | None) -> Parallel:
    if text is None:
        raise UsageError("estimate gpt: give --parallel tp=T,pp=P,dp=D")
    try:
        return Parallel(**_pairs(text, "--parallel", {"tp": "tp", "pp": "pp", "dp": "dp"}))
    except ValueError as e:
        raise UsageError(f"--parallel {text!r}: {e}") from None


def _pairs(text: str, flag: str, keys: dict) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep or k not in keys:
            raise UsageError(f"{flag} {text!r}: {part!r} is not one of {', '.join(f'{x}=N' for x in keys)}")
        if not v.isdigit() or int(v) < 1:
            raise UsageError(f"{flag} {text!r}: {k} must be a positive integer, got {v!r}")
        out[keys[k]] = int(v)
    return out


def topology_of(args, par: Parallel) -> Topology:
    """``--topology`` (a cluster name or a JSON file), else the device's DGX cluster; ``--nodes``
    sets the devices a node holds."""
    device = args.device or "a100"
    per_node = None
    if args.nodes is not None:
        if args.nodes < 1 or par.devices % args.nodes:
            raise UsageError(f"--nodes {args.nodes}: {par.devices} devices do not spread evenly over them")
        per_node = par.devices // args.nodes
    name = args.topology or DEFAULT_CLUSTER.get(device)
    if name is None:
        raise UsageError(f"--device {device}: no cluster preset; give --topology FILE or one of {', '.join(CLUSTERS)}")
    if name in CLUSTERS:
        return cluster(name, per_node, device)
    topo = read_topology_file(name)
    nodes = Nodes(per_node, topo.nodes.link if topo.nodes else topo.default) if per_node else topo.nodes
    if topo.default is None and not {"tp", "dp", "pp"} <= set(topo.links):
        raise UsageError(f"--topology {name}: give links for tp, dp and pp, or a default")
    return Topology(topo.links, topo.default, nodes, topo.device if args.device is None and topo.device else device)


def given_options(args, batch: int | None) -> dict:
    if batch is None:
        raise UsageError("estimate gpt: give --batch B (sequences per step)")
    given = {"batch": batch, "attention": args.attention, "fused_accumulation": args.grad_accumulation == "fused"}
    if args.microbatch is not None:
        given["microbatch"] = args.microbatch
    if args.schedule is not None:
        try:
            given["schedule"] = Schedule.parse(args.schedule)
        except ValueError as e:
            raise UsageError(str(e)) from None
    for flag in ("recompute", "zero"):
        if getattr(args, flag) is not None:
            given[flag] = getattr(args, flag)
    if args.sequence_parallel is not None:
        given["sequence_parallel"] = args.sequence_parallel == "on"
    return given


def execute(args, out: Output) -> int:
    if args.program != "gpt":
        raise UsageError(f"--config / --parallel estimate a GPT step: the program is gpt, not {args.program!r}")
    model, default_batch = parse_config(args.config)
    par = parse_parallel(args.parallel)
    topo = topology_of(args, par)
    given = given_options(args, args.batch or default_batch)
    try:
        tuned = tune(model, par, given, topo.device, topo)
    except ValueError as e:
        raise UsageError(f"estimate gpt: {e}") from None
    step = tuned.step
    summary = step.summary()
    doc = {"command": "estimate gpt", "config": {k: getattr(model, k) for k in CONFIG_KEYS},
           "parallel": {"tp": par.tp, "pp": par.pp, "dp": par.dp}, "devices": par.devices,
           "device": topo.device.name, "topology": topo.to_dict(), "batch": given["batch"],
           "chosen": list(tuned.chosen), "candidates": tuned.candidates, **summary,
           "mfu_flops_per_device": model_flops(model, given["batch"]) / (step.step_seconds * par.devices)}
    out.heading(f"gpt {model.name or 'from numbers'}", f"{model.layers} layers, hidden {model.hidden}, "
                f"{model.heads} heads, vocab {model.vocab}, seq {model.seq}: {model.params / 1e9:,.2f}B parameters")
    out.line(f"{par.devices} x {topo.device.name} (tp={par.tp}, pp={par.pp}, dp={par.dp}), batch {given['batch']}")
    out.line(f"step {fmt_seconds(step.step_seconds)}; {summary['model_flops_per_device'] / 1e12:,.1f} TFLOP/s per "
             f"device by Megatron's count (which counts a recomputed forward pass), "
             f"{doc['mfu_flops_per_device'] / 1e12:,.1f} of model FLOPs; "
             f"peak memory {fmt_bytes(int(step.peak_bytes))} per device"
             + ("" if step.fits else f": does NOT fit the device's {fmt_bytes(int(step.device_memory))}"))
    out.line("chosen (the fastest that fits): " + (", ".join(f"{k} {summary[k]}" for k in tuned.chosen) or "nothing, all given"))
    out.line("time: " + ", ".join(f"{k.replace('_', ' ')} {fmt_seconds(v)}" for k, v in summary["seconds"].items()))
    if args.json:
        write_json(args.json, doc)
    return EXIT_OK


__all__ = ["add_flags", "execute", "wanted"]
