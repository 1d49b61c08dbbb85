"""``ss.from_torch(module, example_inputs, placements=...)``: a PyTorch module (or function) as a
simshard program, from ``torch.export``'s graph of core ATen ops (``run_decompositions``), each op
bound as simshard's op of the same meaning (``torch_aten.ATEN``).

The program takes the module's state first (a dict by parameter name, ``imported.parameters``),
then the inputs, so parameters are sharded like any input: by the placements given (DTensor
placements per name), or by a ``parallelize_module`` plan (``torch_sharding``).
``imported.arguments`` is ``(parameters, *example inputs)``: ``ss.run(imported, *imported.arguments)``.
"""

from __future__ import annotations

import operator
import re
from typing import Mapping, NamedTuple

import numpy as np

from .common import FrameworkType, check_results, unsupported
from .torch_aten import ATEN

# As for JAX (jax_import.TOLERANCE_ULP): PyTorch's CPU kernels (vectorised exp, fused layer norm
# and softmax, blocked GEMMs) differ from numpy's by a few ULPs per op. Measured on
# docs/examples/torch_transformer.py and a block with embedding, attention and cross-entropy: at
# most 3 ULPs of an output's largest magnitude; 64 leaves 16 times that (docs/import.md).
TOLERANCE_ULP = 64


class AtenNode(NamedTuple):
    """One graph node as an ATen rule sees it."""

    name: str
    out_types: tuple[FrameworkType, ...]
    where: str


class StateInput(NamedTuple):
    """A placeholder of the module's state: its graph name and its name in the module."""

    placeholder: str
    target: str


def numpy_dtype(torch_dtype) -> np.dtype:
    import torch

    return torch.empty((), dtype=torch_dtype).numpy().dtype


def _types(val) -> tuple[FrameworkType, ...]:
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return tuple(FrameworkType(tuple(int(s) for s in v.shape), numpy_dtype(v.dtype)) for v in vals if v is not None)


def source_line(node) -> str:
    """The last frame of the node's stack trace (the user's line), "file:line: code"."""
    trace = node.meta.get("stack_trace") or ""
    frames = [f for f in re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
              if "simshard/importers" not in f[0].replace("\\", "/")]  # not the wrapper of a function
    if not frames:
        return ""
    path, line, fn, code = frames[-1]
    return f"{path}:{line} ({fn}): {code.strip()}"


def _key(target) -> str:
    text = str(target)
    return text[len("aten."):] if text.startswith("aten.") else text


def interpret_graph(ep, state: Mapping, inputs, where: str = "") -> list:
    """The user outputs of exported program ``ep``, its ops bound in the current trace. ``where``
    names the user's code for nodes whose stack trace does not (a function's wrapper module)."""
    import torch

    env: dict = {}
    states = {s.arg.name: s.target for s in ep.graph_signature.input_specs if s.target is not None}
    users = iter(inputs)
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = state[states[node.name]] if node.name in states else next(users)
        elif node.op == "call_function":
            env[node.name] = _call(node, env, torch, where)
        elif node.op == "output":
            outs = torch.fx.node.map_arg(node.args[0], lambda n: env[n.name])
    specs = ep.graph_signature.output_specs
    return [o for o, s in zip(outs, specs) if s.kind.name == "USER_OUTPUT"]


def _call(node, env: dict, torch, fallback: str):
    args = torch.fx.node.map_arg(node.args, lambda n: env[n.name])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n.name])
    if node.target is operator.getitem:
        return args[0][args[1]]
    where, key = source_line(node) or fallback, _key(node.target)
    rule = ATEN.get(key)
    if rule is None:
        raise unsupported("PyTorch", key, "no simshard op has its meaning (simshard/importers/torch_aten.py lists "
                          "the ATen ops it imports)", where)
    types = _types(node.meta.get("val"))
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "layout", "pin_memory", "memory_format")}
    try:
        out = rule(AtenNode(node.name, types, where), *args, **kwargs)
    except (ValueError, TypeError) as e:
        raise unsupported("PyTorch", key, str(e), where) from e
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    check_results("PyTorch", key, outs, types, where)
    return out
