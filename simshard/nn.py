"""``ss.nn``: array ops numpy does not have (``conv2d``: NCHW input by OIHW kernel), and a small
torch-like module system (``Module``, ``Linear``, ``LayerNorm``, ``Embedding``, ``Sequential``).

A module's parameters are plain arrays until ``simshard.dtensor``'s ``parallelize_module`` /
``distribute_module`` turn them into DTensors; its ``forward`` is numpy, so it runs on numpy
arrays, inside ``ss.jit`` on tracers, and on DTensors and eager arrays through their numpy
protocols. While a module runs, ``current_module()`` names it (``Net.proj``), which
``CommDebugMode`` reads to count collectives per module as torch's does.
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Iterator

import numpy as np

from .tracing.state import as_tracer
from .tracing.tracer import bind


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


def conv2d(x, w, stride=1, padding=0):
    """2-D convolution (cross-correlation, like every DL framework): ``x[N,C,H,W] * w[O,C,KH,KW]``.

    ``stride`` is an int or (sh, sw); ``padding`` an int, (ph, pw), ((top, bottom), (left, right))
    of zeros, or ``"VALID"``.
    """
    if padding == "VALID":
        pads = ((0, 0), (0, 0))
    elif isinstance(padding, int):
        pads = ((padding, padding), (padding, padding))
    else:
        p0, p1 = padding
        pads = tuple((p, p) if isinstance(p, int) else (int(p[0]), int(p[1])) for p in (p0, p1))
    return bind("conv2d", as_tracer(x), as_tracer(w), stride=_pair(stride, "stride"), padding=pads)


# -- modules ---------------------------------------------------------------------------------------
_RUNNING: contextvars.ContextVar[tuple] = contextvars.ContextVar("simshard_nn_module", default=("", None))


def current_module() -> str:
    """The path of the module running now (``Net``, ``Net.proj``), or "" outside any."""
    return _RUNNING.get()[0]


class Module:
    """torch's ``nn.Module``, reduced: sub-modules and parameters are attributes (arrays are
    parameters), ``forward`` computes, hooks run around it (``register_forward_pre_hook``:
    ``hook(module, args) -> args or None``; ``register_forward_hook``: ``hook(module, args,
    output) -> output or None``)."""

    def __init__(self):
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_pre_hooks", [])
        object.__setattr__(self, "_hooks", [])

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Module):
            self._children[name] = value
        elif hasattr(value, "shape") and hasattr(value, "dtype") and not name.startswith("_"):
            self._params[name] = value
        object.__setattr__(self, name, value)

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        return iter(self._children.items())

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def param_names(self) -> tuple[str, ...]:
        """This module's own parameters' attribute names (not its sub-modules')."""
        return tuple(self._params)

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        for path, m in self.named_modules():
            for name, p in m._params.items():
                yield (f"{path}.{name}" if path else name), p

    def parameters(self) -> list:
        return [p for _, p in self.named_parameters()]

    def register_forward_pre_hook(self, hook: Callable) -> None:
        self._pre_hooks.append(hook)

    def register_forward_hook(self, hook: Callable) -> None:
        self._hooks.append(hook)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args, **kwargs):
        token = _RUNNING.set((self.path_under(*_RUNNING.get()), self))
        try:
            for hook in self._pre_hooks:
                got = hook(self, args)
                args = args if got is None else got if isinstance(got, tuple) else (got,)
            out = self.forward(*args, **kwargs)
            for hook in self._hooks:
                got = hook(self, args, out)
                out = out if got is None else got
            return out
        finally:
            _RUNNING.reset(token)

    def path_under(self, path: str, parent: "Module | None") -> str:
        """This module's path when ``parent`` (at ``path``) runs it: by its attribute name there."""
        if parent is None:
            return type(self).__name__
        for name, child in parent.named_children():
            if child is self:
                return f"{path}.{name}"
        return f"{path}.{type(self).__name__}"


class Linear(Module):
    """``y = x @ weight.T + bias``; ``weight`` is (out_features, in_features) as torch's."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, rng=None, dtype=np.float32):
        super().__init__()
        rng = np.random.default_rng(0) if rng is None else rng
        self.weight = rng.integers(-2, 3, size=(out_features, in_features)).astype(dtype)  # exact in float
        self.bias = rng.integers(-2, 3, size=(out_features,)).astype(dtype) if bias else None

    def forward(self, x):
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias


class LayerNorm(Module):
    """Normalise over the last dims (``normalized_shape``), then scale and shift."""

    def __init__(self, normalized_shape, eps: float = 1e-5, *, dtype=np.float32):
        super().__init__()
        self.shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = np.ones(self.shape, dtype)
        self.bias = np.zeros(self.shape, dtype)

    def forward(self, x):
        axes = tuple(range(-len(self.shape), 0))
        mu = np.mean(x, axis=axes, keepdims=True)
        var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.weight + self.bias


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by integer ids."""

    def __init__(self, num_embeddings: int, embedding_dim: int, *, rng=None, dtype=np.float32):
        super().__init__()
        rng = np.random.default_rng(0) if rng is None else rng
        self.weight = rng.integers(-2, 3, size=(num_embeddings, embedding_dim)).astype(dtype)

    def forward(self, ids):
        return np.take(self.weight, ids, axis=0)


class Sequential(Module):
    """Modules applied in order (named "0", "1", ...)."""

    def __init__(self, *modules: Module):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for _, m in self.named_children():
            x = m(x)
        return x
