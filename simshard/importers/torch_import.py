"""``ss.from_torch``: the entry point (``torch_export`` interprets the graph, ``torch_sharding``
reads placements and plans). torch is imported inside, when called: it is optional."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import optree

from ..errors import ShardingError
from ..tracing.tracer import ShapeDtype
from .common import FrameworkOutputs, require
from .imported import Built, ImportedFunction, named_like
from .torch_export import TOLERANCE_ULP, interpret_graph
from .torch_sharding import convert_mesh, convert_placements, plan_placements


def _as_module(module_or_fn):
    torch = require("torch", "ss.from_torch")

    if isinstance(module_or_fn, torch.nn.Module):
        return module_or_fn

    class Function(torch.nn.Module):
        def forward(self, *args):
            return module_or_fn(*args)

    return Function()


def from_torch(module_or_fn, example_inputs, placements: Mapping | None = None, *, mesh=None,
               plan: Mapping | None = None, plan_axis: str | None = None,
               tolerance_ulp: int = TOLERANCE_ULP) -> ImportedFunction:
    """A PyTorch module or function as a function simshard runs: ``f(parameters, *inputs)``.

    ``placements``: DTensor placements (PyTorch's ``Shard``/``Replicate``/``Partial`` or
    simshard's, or any sharding spelling) by parameter name (``"fc1.weight"``) or input name
    (the forward's argument); ``plan``: a ``parallelize_module`` plan (``{"fc1": ColwiseParallel()}``)
    over mesh axis ``plan_axis`` (default the last); ``mesh``: a simshard Mesh or a DeviceMesh.
    Parameters named by neither are replicated (as PyTorch holds them); inputs named by neither
    are left to propagation."""
    torch = require("torch", "ss.from_torch")

    module = _as_module(module_or_fn)
    example = tuple(example_inputs)
    ep = torch.export.export(module, example).run_decompositions()
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    state = {s.target: _numpy(_state_value(ep, s.target)) for s in ep.graph_signature.input_specs if s.target is not None}
    ss_mesh = convert_mesh(mesh) if mesh is not None else None
    given = dict(plan_placements(module, plan, ss_mesh, plan_axis)) if plan else {}
    given.update({k: convert_placements(v) for k, v in (placements or {}).items()})
    unknown = sorted(set(given) - set(state) - set(names))
    if unknown:
        raise ShardingError("invalid-spec", f"placements name {unknown}, which are neither parameters "
                            f"({sorted(state)[:6]}...) nor inputs ({names}) of {type(module).__name__}")
    # a parameter no placement or plan names is an ordinary tensor on every rank: replicated, as
    # PyTorch holds it (so propagation does not shard the model's state on its own)
    replicated = "[" + ", ".join(["R"] * len(ss_mesh.axis_names)) + "]" if ss_mesh is not None else None
    in_shardings = ({k: given.get(k, replicated) for k in state}, *[given.get(n) for n in names])
    out_spec = ep.call_spec.out_spec

    code = getattr(module_or_fn, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno} ({code.co_name})" if code is not None else ""

    def imported(params, *inputs):
        results = interpret_graph(ep, params, inputs, where)
        return out_spec.unflatten(results) if out_spec is not None else results

    imported.__name__ = type(module).__name__
    named_like(imported, ["params", *names])

    def build(args: tuple) -> Built:
        return Built(imported, in_shardings, None, ss_mesh)

    def reference(args: tuple) -> FrameworkOutputs:
        params, inputs = args[0], args[1:]
        tensors = {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()}
        with torch.no_grad():
            out = torch.func.functional_call(module, tensors, tuple(torch.as_tensor(np.asarray(x)) for x in inputs))
        leaves = optree.tree_leaves(out, none_is_leaf=False)
        return FrameworkOutputs(f"torch {torch.__version__}", tuple(np.asarray(t.detach()) for t in leaves),
                                int(tolerance_ulp))

    result = ImportedFunction(type(module).__name__, build, reference)
    result.parameters = state
    result.arguments = (state, *[_numpy(x) for x in example])
    return result


def _state_value(ep, target: str):
    return ep.state_dict[target] if target in ep.state_dict else ep.constants[target]


def _numpy(x):
    """A tensor's values as numpy; a tensor on the meta device (a model too large to hold, for
    ``ss.estimate``) as a ShapeDtype."""
    if getattr(x, "is_meta", False):
        from .torch_export import numpy_dtype

        return ShapeDtype(tuple(x.shape), numpy_dtype(x.dtype))
    return x.detach().cpu().numpy().copy() if hasattr(x, "detach") else np.asarray(x)


__all__ = ["from_torch"]
