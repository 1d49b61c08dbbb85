"""``ss.run``: trace, shard, partition, execute, verify, report — one call.

    res = ss.run(f, x, w, mesh=mesh, in_shardings=(P("x", None), None))   # backend="ray" by default
    res.outputs, res.verify.bitwise, res.comm, res.memory

The compiler stages are pure functions (trace -> propagate -> partition); this module is the
only place that also executes, so it lives in the runtime.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import optree

from simshard.errors import ReplicaMismatchError, TraceError
from simshard.ir.program import Program
from simshard.ops.threads import one_blas_thread
from simshard.spmd import SpmdProgram
from simshard.propagate.prepare import prepare
from simshard.report import CommReport, MemoryReport, VerifyReport
from simshard.report.framework import against_framework
from simshard.report.opcheck import check_ops as verify_ops, program_bytes
from simshard.tracing.committed import plain_numpy
from simshard.tracing.context import get_mesh, use_mesh

from ..calls.comm_debug import observe_run
from ..core.placement import assemble_outputs, shard_inputs
from .backends import BACKENDS, backend_named, default_backend, options_of


# the partitioner's package (``ss.partition``, the function, shadows its name on the package root);
# its ``partition`` is looked up at each run, so that a test may stand in a wrong one
partitioning = importlib.import_module("simshard.partition")

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
    plain = getattr(f, "fun", None) or getattr(f, "__wrapped__", None) or f
    try:
        # under the run's mesh: a transformation (ss.grad) traces the function even here, and
        # its sharding constraints name that mesh's axes
        with use_mesh(mesh if mesh is not None else get_mesh()), plain_numpy():  # nothing committed to devices
            expected = optree.tree_leaves(plain(*args), none_is_leaf=False)
    except TraceError:
        return VerifyReport.against(program, leaves, outputs, notes=["reference: the program run whole"] * len(outputs))
    return VerifyReport.compare(outputs, [np.asarray(e) for e in expected])


def _assembled(spmd: SpmdProgram, execution, leaves, check_ops: bool) -> tuple[np.ndarray, ...]:
    """The global outputs from the devices' shards. Replicas that disagree cannot be assembled: with
    ``check_ops`` the error then names the first op that went wrong, found op by op."""
    try:
        return assemble_outputs(spmd, execution.outputs)
    except ReplicaMismatchError as e:
        if not check_ops:
            raise
        with one_blas_thread():
            report = VerifyReport((), verify_ops(spmd, execution.values, leaves))
        first = report.first_divergence
        err = ReplicaMismatchError(f"{e}; op by op, the first wrong op: {first.describe()}" if first else str(e))
        err.verify = report
        raise err from e


def _check_options(backend: str, given) -> None:
    """An unknown keyword is a TypeError naming it and the nearest one ``ss.run`` knows."""
    known = options_of(backend)
    unknown = sorted(set(given) - known)
    if not unknown:
        return
    every = set(inspect.signature(run).parameters) - {"f", "args", "backend_options"}
    every |= {o for name in BACKENDS for o in options_of(name)}
    k = unknown[0]
    if k in every:
        hint = f": it is an option of another backend, not of backend={backend!r}"
    else:
        near = difflib.get_close_matches(k, sorted(every), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
    raise TypeError(f"ss.run() got an unexpected keyword argument {k!r}{hint} "
                    f"(backend={backend!r} takes: {', '.join(sorted(known)) or 'none'})")


def run(f, *args, mesh=None, backend: str | None = None, in_shardings=None, out_shardings=None,
        static_argnums: Sequence[int] = (), strategy: str = "user_priority", device_memory=None,
        timeout: float = 10.0, check_ops: bool | None = None, progress: Callable[[str], None] | None = None,
        reference: Callable | None = None, **backend_options) -> RunResult:
    """Run ``f(*args)`` sharded: every device runs its own schedule on its own shards.

    ``f`` is an ``ss.jit`` / ``sjit`` function (shardings given there) or a plain function with
    ``in_shardings`` / ``out_shardings`` here (PartitionSpecs, NamedShardings, Shardings,
    DTensorSpecs, or Shardy text resolved against ``mesh``). The result is verified bit for bit against the
    program run whole in one process.

    ``check_ops``: also verify op by op (``res.verify.op_checks``): each op's result as the devices
    hold it, assembled, against the op run whole on the assembled inputs; a wrong partition is
    named by ``res.verify.first_divergence`` (op, device, global index). It keeps every op's result
    per device during the run, so by default (None) it is on when the program's values together
    take at most ``OPCHECK_MAX_BYTES`` (64 MiB).

    ``backend`` (``front/backends.py``): ``"ray"`` (the default: one Ray actor per device, started
    for this run; ``address=`` joins a Ray cluster, else a local Ray is started on demand or the
    initialised one reused; ``node_axes=("host",)`` puts the devices sharing every coordinate of
    those mesh axes on one node, so only those axes cross nodes: ``cluster/README.md``;
    ``ray_mesh=`` runs on a kept ``ss.runtime.RayMesh``; ``retries=N`` restarts a device whose
    actor died and runs again) or ``"local"`` (every device an asyncio task in this process: the
    same schedules and collectives, much faster to start). ``SIMSHARD_BACKEND`` changes the default.

    ``reference``: a plain numpy function of the same arguments to verify against instead of ``f``
    (a manual region's default reference is the region run whole, which shares its body's mistakes).

    ``progress``: called with a short description as each stage starts (tracing, partitioning,
    starting device actors, running, verifying), for a progress display.
    """
    say, backend = progress or (lambda stage: None), backend or default_backend()
    _check_options(backend, backend_options)
    say("tracing and propagating")
    program, leaves = prepare(f, *args, mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                              static_argnums=static_argnums, strategy=strategy)
    say("partitioning")
    spmd = partitioning.partition(program)
    check_ops = program_bytes(program) <= OPCHECK_MAX_BYTES if check_ops is None else check_ops
    execution = backend_named(backend).run(spmd, shard_inputs(spmd, *leaves), mesh=mesh, device_memory=device_memory, timeout=timeout,
                                           trace_values=bool(check_ops), progress=say, **backend_options)
    observe_run(f"ss.run {getattr(f, '__name__', type(f).__name__)}", execution, program, spmd)
    outputs = _assembled(spmd, execution, leaves, check_ops)
    say("verifying against numpy")
    with one_blas_thread():  # the reference's kernels as the devices ran theirs
        verify = _verify(f if reference is None else reference, args, program, leaves, outputs, mesh)
        verify = verify.with_ops(verify_ops(spmd, execution.values, leaves)) if check_ops else verify
    # a program imported from JAX / PyTorch: its outputs against the framework's own, too
    verify = verify.with_framework(against_framework(f, args, program, leaves, outputs))
    structured = optree.tree_unflatten(program.out_tree, list(outputs)) if program.out_tree is not None else outputs
    return RunResult(structured, verify, execution.comm, execution.memory, program, spmd, execution)
