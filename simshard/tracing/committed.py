"""Arrays committed to devices, as tracing sees them: a protocol, so tracing never imports the runtime.

The runtime's eager arrays (``ss.device_put``'s, an eager op's results, DTensors) live on the
devices, above the compiler. Tracing meets them in three places: ``ss.typeof`` reads their type,
and ``ss.jit`` / ``ss.reshard`` called on them outside a trace run eagerly on their devices. A
committed array's class says so by two attributes, read here and nowhere else:

* ``committed_sharding``: the ``Sharding`` its shards are laid out by (its type is that sharding
  over the explicit axes of its mesh, ``explicit.api.typeof``);
* ``__simshard_eager__(fun, args, kwargs, **options)``: run ``fun(*args, **kwargs)`` on the devices
  holding the arrays (the runtime's eager call: trace, propagate, partition, execute, cached), with
  ``options`` those of ``ss.jit`` (``out_shardings``, ``static_argnums``, ``in_shardings``, ``mesh``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable

import optree

from ..ir import trace_stack


def is_committed(x) -> bool:
    """True for an array that lives on the devices (a runtime eager array)."""
    return hasattr(type(x), "__simshard_eager__") and hasattr(x, "committed_sharding")


def committed_leaves(tree) -> list:
    """The committed arrays among the leaves of ``tree``."""
    return [x for x in optree.tree_leaves(tree, none_is_leaf=False) if is_committed(x)]


def eager_runner(tree) -> Callable | None:
    """Outside a trace, the eager call of the first committed array in ``tree`` (None inside a
    trace, or when ``tree`` holds none: the caller then traces as usual)."""
    if trace_stack.current() is not None:
        return None
    found = committed_leaves(tree)
    return type(found[0]).__simshard_eager__ if found else None


def run_eagerly(fun: Callable, args: tuple, kwargs: dict, **options) -> Any:
    """``fun(*args, **kwargs)`` run on the devices of the committed arrays among ``args``."""
    runner = eager_runner((args, kwargs))
    if runner is None:
        raise ValueError("run_eagerly: no array committed to devices among the arguments")
    return runner(fun, args, kwargs, **options)


_PUT: list[Callable] = []  # the runtime's device_put, handed down by the package root (``install_put``)
_PLAIN: contextvars.ContextVar[bool] = contextvars.ContextVar("simshard_plain_numpy", default=False)


@contextlib.contextmanager
def plain_numpy():
    """Inside the block nothing is committed to devices: a function run as the plain numpy
    reference of a run (``ss.run``'s verification) computes in this process only."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def install_put(put: Callable) -> None:
    """Give tracing the runtime's ``device_put(x, sharding)`` (the package root does, so that
    ``simshard.numpy``'s ``out_sharding=`` outside a trace commits its result as JAX's does)."""
    _PUT[:] = [put]


def on_devices(fn: Callable) -> Callable:
    """``fn`` that, called outside a trace on committed arrays, runs on their devices as one eager
    op with ``fn``'s own rules (``simshard.numpy`` wraps its functions so); called outside a trace
    with ``out_sharding=`` on no committed array (``zeros``, ``arange``), computes its value and
    commits it with that sharding; else ``fn`` as it is."""

    @functools.wraps(fn)
    def eager(*args, **kwargs):
        runner = eager_runner((args, kwargs))
        if runner is not None:
            return runner(fn, args, kwargs)
        if (kwargs.get("out_sharding") is not None and _PUT and not _PLAIN.get()
                and trace_stack.current() is None):
            sharding = kwargs.pop("out_sharding")
            return _PUT[0](fn(*args, **kwargs), sharding)
        return fn(*args, **kwargs)

    return eager


__all__ = ["committed_leaves", "eager_runner", "install_put", "is_committed", "on_devices", "plain_numpy",
           "run_eagerly"]
