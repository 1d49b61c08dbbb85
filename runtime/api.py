"""``ss.run``: trace, shard, partition, execute, verify, report — one call.

    res = ss.run(f, x, w, mesh=mesh, in_shardings=(P("x", None), None))   # backend="ray" by default
    res.outputs, res.verify.bitwise, res.comm, res.memory

The compiler stages are pure functions (trace -> propagate -> partition); this module is the
only place that also executes, so it lives in the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import optree

from simshard.ops.threads import one_blas_thread
from simshard.spmd import SpmdProgram
from simshard.propagate.prepare import prepare
from simshard.ir.program import Program
from simshard.report import CommReport, MemoryReport, VerifyReport

from .placement import assemble_outputs, shard_inputs


OPCHECK_MAX_BYTES = 64 << 20  # ss.run checks op by op by default up to this many bytes of values


@dataclass(frozen=True)
class RunResult:
    """What a run produced and what it cost."""

    outputs: Any  # global arrays in the function's output structure
    verify: VerifyReport
    comm: CommReport
    memory: MemoryReport
    program: Program  # the propagated program
    spmd: SpmdProgram
    execution: Any

    def shards(self, device: int) -> tuple[np.ndarray, ...]:
        """The output shards ``device`` holds."""
        return tuple(self.execution.outputs[device])


def _verify(f, args, program: Program, leaves, outputs, mesh=None) -> VerifyReport:
    """Compare with the user's own function run whole in plain numpy; where it cannot run outside
    a trace (a manual region, say), with the program run whole by the registry's kernels."""
    from simshard.tracing.tracer import TraceError

    from simshard.tracing.context import get_mesh, use_mesh

    plain = getattr(f, "fun", None) or getattr(f, "__wrapped__", None) or f
    try:
        # under the run's mesh: a transformation (ss.grad) traces the function even here, and
        # its sharding constraints name that mesh's axes
        with use_mesh(mesh if mesh is not None else get_mesh()):
            expected = optree.tree_leaves(plain(*args), none_is_leaf=False)
    except TraceError:
        return VerifyReport.against(program, leaves, outputs, notes=["reference: the program run whole"] * len(outputs))
    return VerifyReport.compare(outputs, [np.asarray(e) for e in expected])


def options_of(backend: str) -> frozenset[str]:
    """The keywords ``ss.run`` passes on to ``backend``: its runner's (and for Ray, ``RayMesh``'s)
    own options, read off their signatures."""
    import inspect

    own = {"spmd", "inputs", "mesh", "device_memory", "timeout", "trace_values", "progress", "devices", "address",
           "node_axes"}
    if backend == "local":
        from .local import run_local

        runners = [run_local]
    elif backend == "ray":
        from .ray_mesh import RayMesh, run_ray

        runners = [run_ray, RayMesh.__init__]
        own -= {"address", "node_axes"}
    else:
        raise ValueError(f"ss.run: unknown backend {backend!r} (available: 'local', 'ray')")
    names = {p.name for r in runners for p in inspect.signature(r).parameters.values()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return frozenset(names - own - {"self"})


def _check_options(backend: str, given) -> None:
    """An unknown keyword is a TypeError naming it and the nearest one ``ss.run`` knows."""
    import difflib
    import inspect

    known = options_of(backend)
    unknown = sorted(set(given) - known)
    if not unknown:
        return
    every = set(inspect.signature(run).parameters) - {"f", "args", "backend_options"}
    every |= options_of("local") | options_of("ray")
    k = unknown[0]
    if k in every:
        hint = f": it is an option of another backend, not of backend={backend!r}"
    else:
        near = difflib.get_close_matches(k, sorted(every), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
    raise TypeError(f"ss.run() got an unexpected keyword argument {k!r}{hint} "
                    f"(backend={backend!r} takes: {', '.join(sorted(known)) or 'none'})")


def default_backend() -> str:
    """``ray`` unless ``SIMSHARD_BACKEND`` names another backend."""
    import os

    return os.environ.get("SIMSHARD_BACKEND", "ray")


def run(
    f,
    *args,
    mesh=None,
    backend: str | None = None,
    in_shardings=None,
    out_shardings=None,
    static_argnums: Sequence[int] = (),
    strategy: str = "user_priority",
    device_memory=None,
    timeout: float = 10.0,
    check_ops: bool | None = None,
    progress: Callable[[str], None] | None = None,
    reference: Callable | None = None,
    **backend_options,
) -> RunResult:
    """Run ``f(*args)`` sharded: every device runs its own schedule on its own shards.

    ``f`` is an ``ss.jit`` / ``sjit`` function (shardings given there) or a plain function with
    ``in_shardings`` / ``out_shardings`` here (PartitionSpecs, NamedShardings, Shardings,
    DTensorSpecs, or Shardy text resolved against ``mesh``). The result is verified bit for bit against the
    program run whole in one process.

    ``check_ops``: also verify op by op (``res.verify.op_checks``): each op's result as the devices
    hold it right after the op, assembled, against the op run whole on the assembled inputs; a
    wrong partition is named by ``res.verify.first_divergence`` (op, device, global index), a float
    reduction the partition sharded is reported as reassociated (mesh axes, ULP distance). It keeps
    a copy of every op's result per device during the run, so the default (None) turns it on only
    when all the program's values together take at most ``OPCHECK_MAX_BYTES`` (64 MiB).

    ``backend``: ``"ray"`` (the default: one Ray actor per device, started for this run; ``address=`` joins an existing Ray cluster, by
    default a local Ray is started on demand or the initialised one reused; ``node_axes=("host",)``
    puts the devices that share every coordinate of those mesh axes on one node, through a Ray
    placement group, so only those axes cross nodes — see ``cluster/README.md``). To keep device
    actors across runs use ``ss.runtime.RayMesh`` (``ray_mesh=`` runs on one); ``retries=N`` restarts a device whose actor
    died and runs again, up to N times (see ``RayMesh.execute``); or ``"local"`` (every device an
    asyncio task in this process: the same schedules and collectives, much faster to start). The
    environment variable ``SIMSHARD_BACKEND`` changes the default (the test suite sets ``local``).

    ``reference``: a plain numpy function of the same arguments to verify the outputs against,
    instead of ``f`` itself. A manual region (``shard_map``) cannot run outside a trace, so by
    default its reference is the region run whole, which shares any mistake of its body (a
    ``psum`` over the wrong axes); give the plain model here to catch that.

    ``progress``: called with a short description as each stage starts (tracing, partitioning,
    starting device actors, running, verifying), for a progress display.
    """
    from simshard.partition import partition

    say = progress or (lambda stage: None)
    backend = backend or default_backend()
    _check_options(backend, backend_options)
    say("tracing and propagating")
    program, leaves = prepare(f, *args, mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                              static_argnums=static_argnums, strategy=strategy)
    from simshard.report.opcheck import check_ops as _check_ops, program_bytes

    say("partitioning")
    spmd = partition(program)
    inputs = shard_inputs(spmd, *leaves)
    if check_ops is None:
        check_ops = program_bytes(program) <= OPCHECK_MAX_BYTES
    if backend == "local":
        from .local import run_local

        say(f"running on {len(spmd.devices)} devices in this process")
        execution = run_local(spmd, inputs, device_memory=device_memory, timeout=timeout,
                              trace_values=bool(check_ops), **backend_options)
    elif backend == "ray":
        from .ray_mesh import run_ray

        execution = run_ray(spmd, inputs, mesh=mesh, device_memory=device_memory, timeout=timeout,
                            trace_values=bool(check_ops), progress=say, **backend_options)
    from simshard.errors import ReplicaMismatchError

    from .comm_debug import observe_run

    observe_run(f"ss.run {getattr(f, '__name__', type(f).__name__)}", execution, program, spmd)
    try:
        outputs = assemble_outputs(spmd, execution.outputs)
    except ReplicaMismatchError as e:
        if not check_ops:
            raise
        # the outputs cannot even be assembled: name the first op that went wrong
        with one_blas_thread():
            report = VerifyReport((), _check_ops(spmd, execution.values, leaves))
        first = report.first_divergence
        err = ReplicaMismatchError(f"{e}; op by op, the first wrong op: {first.describe()}" if first else str(e))
        err.verify = report
        raise err from e
    say("verifying against numpy")
    with one_blas_thread():  # the reference's kernels as the devices ran theirs
        verify = _verify(f if reference is None else reference, args, program, leaves, outputs, mesh)
        if check_ops:
            verify = verify.with_ops(_check_ops(spmd, execution.values, leaves))
    structured = optree.tree_unflatten(program.out_tree, list(outputs)) if program.out_tree is not None else outputs
    return RunResult(structured, verify, execution.comm, execution.memory, program, spmd, execution)
