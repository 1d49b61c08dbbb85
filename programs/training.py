"""Training steps for the programs library: a squared-error loss over a program's forward pass,
its gradient by ``ss.value_and_grad``, and an optimizer (SGD or Adam) updating the parameters.

``train_step(forward, optimizer)`` gives ``step(params, opt_state, x, y) -> (loss, params,
opt_state)``. The optimizers act element by element, so a sharded update gives the same bits as
the whole one whatever the layout; with exact-arithmetic inputs the gradients are exact too, and a
whole step verifies bit for bit. Optimizer state is laid out like the parameters (``state_specs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import optree

import simshard as ss
from simshard import P

# Powers of two: the SGD update of an exact gradient stays exact in float32.
LR = 2.0**-6


@dataclass(frozen=True)
class Optimizer:
    """``init(params) -> state``; ``update(grads, state, params) -> (params, state)``; ``about`` for reports."""

    name: str
    about: str
    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]
    # the state's layout from the parameters' (one spec per parameter leaf, or P() for a counter)
    state_specs: Callable[[Any], Any]


def sgd(lr: float = LR) -> Optimizer:
    def update(grads, state, params):
        return optree.tree_map(lambda p, g: p - lr * g, params, grads), state

    return Optimizer("sgd", f"SGD (lr {lr:g})", lambda params: (), update, lambda specs: ())


def adam(lr: float = LR, b1: float = 0.875, b2: float = 0.9921875, eps: float = 2.0**-20) -> Optimizer:
    """Adam with bias correction; its moments are laid out like the parameters (ZeRO shards them
    with the parameters)."""

    def init(params):
        zeros = optree.tree_map(np.zeros_like, params)
        return {"m": zeros, "v": optree.tree_map(np.zeros_like, params), "t": np.zeros((), np.float32)}

    def update(grads, state, params):
        t = state["t"] + 1
        m = optree.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = optree.tree_map(lambda v, g: b2 * v + (1 - b2) * (g * g), state["v"], grads)
        c1, c2 = 1 - b1**t, 1 - b2**t
        new = optree.tree_map(lambda p, m, v: p - lr * (m / c1) / (np.sqrt(v / c2) + eps), params, m, v)
        return new, {"m": m, "v": v, "t": t}

    return Optimizer("adam", f"Adam (lr {lr:g}, b1 {b1:g}, b2 {b2:g})", init, update,
                     lambda specs: {"m": specs, "v": specs, "t": P()})


OPTIMIZERS = {"sgd": sgd, "adam": adam}


def squared_error(out, y):
    return np.sum((out - y) ** 2) / out.size


def train_step(forward: Callable, optimizer: Optimizer, loss: Callable = squared_error) -> Callable:
    """``step(params, opt_state, x, y) -> (loss, params, opt_state)``: one step of ``optimizer`` on
    ``loss(forward(params, x), y)``."""

    def objective(params, x, y):
        return loss(forward(params, x), y)

    def step(params, opt_state, x, y):
        value, grads = ss.value_and_grad(objective)(params, x, y)
        params, opt_state = optimizer.update(grads, opt_state, params)
        return value, params, opt_state

    step.__name__ = f"{getattr(forward, '__name__', 'forward')}_{optimizer.name}_step"
    return step


def step_shardings(optimizer: Optimizer, param_specs, x_spec, y_spec):
    """``(in_shardings, out_shardings)`` of a step whose parameters are laid out ``param_specs``:
    the optimizer state like them, the loss replicated, the new parameters where the old were."""
    state = optimizer.state_specs(param_specs)
    return (param_specs, state, x_spec, y_spec), (P(), param_specs, state)
