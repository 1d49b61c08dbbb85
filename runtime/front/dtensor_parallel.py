"""torch's tensor parallelism over ``simshard.nn`` modules: parallel styles, ``parallelize_module``,
``distribute_module``.

    tp = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))["tp"]
    parallelize_module(model, tp, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    y = model(x)          # up: weight Shard(0), no communication; down: Partial, then all-reduced

A style shards a module's parameters (``Linear`` / ``Embedding`` weights as torch's styles do;
the rest replicated) and wraps its forward: the inputs laid out as the style expects (a plain
array distributed, a DTensor redistributed), the outputs redistributed to ``output_layouts``.
The forward itself is DTensor arithmetic (``dtensor_ops``), so the partial sums of a row-wise
layer are all-reduced by that redistribution and nowhere else.

One difference, on purpose: ``use_local_output`` keeps the DTensor (one controller holds every
rank's local output; ``to_local()`` gives them), so the next style sees its placements as torch's
``from_local`` would state them.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from simshard.errors import ShardingError
from simshard.nn import Embedding, Linear, Module
from simshard.sharding.placements import Placement, Replicate, Shard

from .dtensor import DTensor, distribute_tensor


def _one_dim(mesh, style: str) -> None:
    ndim = mesh.ndim if hasattr(mesh, "ndim") else mesh.mesh.ndim
    if ndim != 1:
        raise ShardingError("invalid-mesh", f"{style} takes a 1-D mesh (a sub-mesh such as mesh['tp']), got {ndim} dims")


def laid_out(x, mesh, placement: Placement):
    """``x`` as a DTensor placed ``[placement]`` on the 1-D ``mesh``: a plain array distributed
    (it is the global value), a DTensor redistributed where it is placed otherwise."""
    if isinstance(x, DTensor):
        return x.redistribute(mesh, [placement])
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return distribute_tensor(np.asarray(x), mesh, [placement])
    return x


def _shard_param(module: Module, name: str, mesh, placement: Placement) -> None:
    value = getattr(module, name, None)
    if value is not None and not isinstance(value, DTensor):
        setattr(module, name, distribute_tensor(np.asarray(value), mesh, [placement]))


def _replicate_params(module: Module, mesh) -> None:
    for name in module.param_names():
        _shard_param(module, name, mesh, Replicate())


@dataclass(frozen=True)
class ParallelStyle:
    """Inputs laid out as ``input_layouts``, outputs redistributed to ``output_layouts``."""

    input_layouts: Placement | None = None
    output_layouts: Placement | None = None
    use_local_output: bool = True

    def shard_params(self, module: Module, mesh) -> None:
        _replicate_params(module, mesh)

    def defaults(self) -> tuple[Placement, Placement]:
        return Replicate(), Replicate()

    def apply(self, module: Module, mesh) -> Module:
        _one_dim(mesh, type(self).__name__)
        self.shard_params(module, mesh)
        ins, outs = self.defaults()
        ins = self.input_layouts or ins
        outs = self.output_layouts or outs
        module.register_forward_pre_hook(lambda m, args: tuple(laid_out(a, mesh, ins) for a in args))
        module.register_forward_hook(lambda m, args, out: laid_out(out, mesh, outs))
        return module


class ColwiseParallel(ParallelStyle):
    """torch's ``ColwiseParallel``: a ``Linear``'s output features (weight and bias ``Shard(0)``),
    an ``Embedding``'s embedding dim (``Shard(1)``); input Replicate, output ``Shard(-1)``."""

    def defaults(self):
        return Replicate(), Shard(-1)

    def shard_params(self, module, mesh):
        if isinstance(module, Linear):
            _shard_param(module, "weight", mesh, Shard(0))
            _shard_param(module, "bias", mesh, Shard(0))
        elif isinstance(module, Embedding):
            _shard_param(module, "weight", mesh, Shard(1))
        else:
            raise ShardingError("invalid-style", f"ColwiseParallel shards Linear and Embedding, not {type(module).__name__}")


class RowwiseParallel(ParallelStyle):
    """torch's ``RowwiseParallel``: a ``Linear``'s input features (weight ``Shard(1)``, bias
    replicated), an ``Embedding``'s rows (``Shard(0)``); input ``Shard(-1)`` (an Embedding's ids
    replicated), output Replicate (the partial sums all-reduced)."""

    def defaults(self):
        return Shard(-1), Replicate()

    def shard_params(self, module, mesh):
        if isinstance(module, Linear):
            _shard_param(module, "weight", mesh, Shard(1))
            _shard_param(module, "bias", mesh, Replicate())
        elif isinstance(module, Embedding):
            _shard_param(module, "weight", mesh, Shard(0))
        else:
            raise ShardingError("invalid-style", f"RowwiseParallel shards Linear and Embedding, not {type(module).__name__}")

    def apply(self, module, mesh):
        if isinstance(module, Embedding) and self.input_layouts is None:
            return RowwiseParallel(Replicate(), self.output_layouts, self.use_local_output).apply(module, mesh)
        return super().apply(module, mesh)


@dataclass(frozen=True)
class SequenceParallel(ParallelStyle):
    """torch's ``SequenceParallel``: parameters replicated (a ``LayerNorm``'s), input and output
    sharded on ``sequence_dim``."""

    sequence_dim: int = 1
    use_local_output: bool = False

    def defaults(self):
        return Shard(self.sequence_dim), Shard(self.sequence_dim)

    def shard_params(self, module, mesh):
        _replicate_params(module, mesh)  # a LayerNorm's weight and bias, say


def parallelize_module(module: Module, device_mesh, parallelize_plan=None) -> Module:
    """Apply a style to ``module``, or each style of a plan ``{path: style}`` to the sub-modules
    whose paths match (``fnmatch`` patterns: ``"layers.*.up"``); an unmatched path is an error."""
    if parallelize_plan is None:
        return module
    if isinstance(parallelize_plan, ParallelStyle):
        return parallelize_plan.apply(module, device_mesh)
    paths = dict(module.named_modules())
    for pattern, style in parallelize_plan.items():
        hits = [p for p in paths if p and fnmatch.fnmatchcase(p, pattern)]
        if not hits:
            raise ShardingError("unknown-module", f"parallelize_module: no sub-module matches {pattern!r} "
                                f"(modules: {', '.join(p for p in paths if p)})")
        for p in hits:
            parallelize_module(paths[p], device_mesh, style)
    return module


def distribute_module(module: Module, device_mesh, partition_fn=None, input_fn=None, output_fn=None) -> Module:
    """torch's ``distribute_module``: ``partition_fn(name, submodule, mesh)`` for every sub-module
    (default: every parameter replicated), ``input_fn(module, inputs, mesh)`` before the forward
    and ``output_fn(module, outputs, mesh)`` after it."""
    for name, sub in list(module.named_modules()):
        if partition_fn is None:
            for pname in sub.param_names():
                value = getattr(sub, pname)
                if not isinstance(value, DTensor):
                    setattr(sub, pname, distribute_tensor(np.asarray(value), device_mesh))
        else:
            partition_fn(name, sub, device_mesh)
    if input_fn is not None:
        module.register_forward_pre_hook(lambda m, args: input_fn(m, args, device_mesh))
    if output_fn is not None:
        module.register_forward_hook(lambda m, args, out: output_fn(m, out, device_mesh))
    return module


__all__ = ["ColwiseParallel", "ParallelStyle", "RowwiseParallel", "SequenceParallel", "distribute_module",
           "laid_out", "parallelize_module"]
