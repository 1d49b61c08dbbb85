"""simshard: run sharded numpy programs on real collectives, verify them bitwise, report the cost.

The package root is the public surface (``import simshard as ss``). The compiler is one package
per stage, each importing only those below it (docs/architecture.md): ``sharding`` (the model),
``ir`` (the Program), ``ops`` (the op registry), ``tracing`` (numpy to Program, explicit mode),
the front ends (``numpy``, ``lax``, ``nn``, ``manual``, ``scalax``, ``fhe``), ``propagate``,
``partition``, ``report``; then ``runtime`` (the executor), ``programs`` and ``cli``.
"""

import importlib

from . import _moved
from .errors import ReplicaMismatchError, ShardingError
from .sharding import (
    REDUCE_OPS, AxisRef, AxisType, DimSharding, DTensorSpec, Layout, Mesh, NamedSharding, P, Partial, Placement,
    RaggedShard, ReduceOp, Replicate, Shard, Sharding, StridedShard, equivalent, layout, make_mesh,
    parse_partition_spec, parse_placement, parse_placements, register_reduce_op, render, show,
)
from .ir import Aval, Program
from . import ops
from .ops import register_op, register_rule
from .tracing import ShapeDtype, TraceError, evaluate, get_mesh, jit, name, set_mesh, trace, use_mesh
from .tracing.explicit import (
    AbstractMesh, DuplicateSpecError, ShardingTypeError, auto_axes, explicit_axes, get_abstract_mesh, typeof,
)
from .tracing.explicit import reshard as _traced_reshard
from .tracing import committed as _committed
from .manual import shard_map
from .transforms import checkpoint, grad, jvp, value_and_grad, vjp, vmap
from .scalax import (
    FSDPShardingRule, MeshShardingHelper, PolicyShardingRule, ShardingRule, TreePathShardingRule,
    with_sharding_annotation, with_sharding_constraint,
)
from .fhe import Utilization, fhe_spec, utilization
from . import lax, nn, numpy  # simshard.lax / simshard.nn / simshard.numpy
from .importers import from_jax, from_torch  # programs from JAX and PyTorch; jax / torch load only when called

_moved.install()  # the module paths from before the split into stage packages still import
__all__ = [
    "AbstractMesh", "AxisType", "DuplicateSpecError", "ShapeDtype", "ShardingTypeError", "auto_axes",
    "explicit_axes", "get_abstract_mesh", "jit", "lax", "numpy", "reshard", "set_mesh", "trace", "typeof",
    "use_mesh",
    "AxisRef", "DimSharding", "DTensorSpec", "Layout", "Mesh", "NamedSharding", "P", "Partial",
    "Placement", "RaggedShard", "REDUCE_OPS", "ReduceOp", "ReplicaMismatchError", "register_reduce_op", "Replicate", "Shard",
    "Sharding", "ShardingError", "StridedShard", "Utilization", "equivalent", "fhe_spec", "layout",
    "make_mesh", "parse_partition_spec", "parse_placement", "parse_placements", "render", "show", "utilization",
    "Aval", "Program", "ShapeDtype", "TraceError", "evaluate", "get_mesh", "jit", "name", "ops",
    "set_mesh", "shard_map", "trace", "use_mesh",
    "FSDPShardingRule", "MeshShardingHelper", "PolicyShardingRule", "ShardingRule", "TreePathShardingRule",
    "with_sharding_annotation", "with_sharding_constraint", "nn", "register_op", "register_rule",
    "checkpoint", "grad", "jvp", "value_and_grad", "vjp", "vmap", "from_jax", "from_torch",
]
__version__ = "0.1.0"

# Automatic sharding propagation (Shardy's algorithm). Note: this binds ``simshard.propagate`` to
# the function; import the modules with ``from simshard.propagate import engine`` etc.
from .propagate import explain, propagate  # noqa: E402

__all__ += ["explain", "propagate"]

# Partitioning: ``ss.partition(program)`` and ``ss.plan_reshard(src, dst, shape)``. As with
# propagate, this binds ``simshard.partition`` to the function; import the modules with
# ``from simshard.partition import reshard`` etc.
from .partition import partition, plan_reshard  # noqa: E402

__all__ += ["partition", "plan_reshard"]

# Reports of a run (communication, memory, bitwise verification) and exact-arithmetic inputs.
from .report import CommRecord, CommReport, Link, MemoryReport, Topology, VerifyReport, exact_inputs  # noqa: E402

__all__ += ["CommRecord", "CommReport", "Link", "MemoryReport", "Topology", "VerifyReport", "exact_inputs"]

# What a run would record, without data or execution (ShapeDtype arguments welcome).
from .report.estimate import estimate  # noqa: E402

__all__ += ["estimate"]

# The strategy of least estimated step time within a memory budget, searched (an integer program
# solved by HiGHS through scipy: the ``auto`` extra, imported when a search runs).
from .autoshard import AutoStrategy, autoshard  # noqa: E402

__all__ += ["AutoStrategy", "autoshard"]


# ``ss.run(f, *args, mesh=..., ...)``: run ``f`` sharded, verify it bit for bit and report its cost.
# The one entry point of the package root that executes: it is ``simshard.runtime.front.api.run``
# itself (its signature and docstring in ``help(ss.run)``), imported on first use by ``__getattr__``
# below, so that ``import simshard`` stays compiler-only (the runtime: ~40 ms).
__all__ += ["device_put", "run"]


def reshard(xs, out_shardings):
    """Give ``xs`` (an array or a pytree of them) the sharding ``out_shardings`` (a P, NamedSharding,
    Sharding, DTensorSpec, placement list or text, or a pytree prefix of them). Inside a trace it is
    ``simshard.tracing.explicit.reshard`` (in explicit mode how a value's type changes; in auto mode
    a hard sharding requirement there); outside one it runs eagerly on the devices, numpy arrays
    committed first (``simshard.runtime.eager.put.reshard``), as JAX's eager ``reshard`` does."""
    from .ir import trace_stack

    if trace_stack.current() is not None:
        return _traced_reshard(xs, out_shardings)
    from .runtime.eager.put import reshard as eager_reshard  # the runtime, on first use (below)

    return eager_reshard(xs, out_shardings)


def _device_put(x, sharding):
    """``ss.device_put``, handed down to tracing (``tracing.committed.install_put``): the runtime on first use."""
    from .runtime.eager.put import device_put

    return device_put(x, sharding)


_committed.install_put(_device_put)  # simshard.numpy's out_sharding= outside a trace commits its result
_LAZY = ("device_put", "dtensor", "run")  # public names ``__getattr__`` imports on first use


def __getattr__(name):
    if name == "run":
        from .runtime.front.api import run  # the runtime, on first use (above)

        globals()["run"] = run
        return run
    if name == "device_put":  # arrays committed to devices live in the runtime too
        from .runtime.eager.put import device_put

        globals()["device_put"] = device_put
        return device_put
    # ``ss.dtensor``: PyTorch DTensor's vocabulary (distribute_tensor, DTensor, CommDebugMode, ...).
    # It runs on the devices, so it lives in the runtime, imported on first use like ``run``'s.
    if name == "dtensor":
        return importlib.import_module("simshard.dtensor")  # simshard.runtime.front.dtensor_api (_moved.PUBLIC)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """The module's names and those imported on first use (``run``, ``dtensor``), for completion."""
    return sorted({*globals(), *_LAZY})
