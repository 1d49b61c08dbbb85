"""``conv2d``: NCHW input, OIHW kernel, stride and zero padding; numpy has none, so ``ss.nn.conv2d``.

The kernel is plain numpy: for every kernel position, one ``einsum`` over the input channels of
the strided window, accumulated from zeros — exact for integer-valued float inputs.

The rule is Shardy's convolution rule (shardy.md a.14) in NCHW / OIHW:

* batch ``N``: pass-through (x, result); output channels ``O``: pass-through (w, result);
* input channels ``C``: reduction (x, w);
* each spatial dim: a permutation factor for the number of windows (x, result) and a reduction
  factor for the window (x, w), the bigger one major, each capped by what is left of the input
  dim and dropped when 1. Their sizes need not multiply to the dims (overlapping windows): they
  are ``inexact`` and only steer propagation.

      x 2x192x224x224, w 64x192x3x3, stride 2, padding (0,1):
      ([a, f, (bc), (de)], [g, f, c, e])->([a, g, b, d]) {a=2, b=112, c=2, d=112, e=2, f=192, g=64}
      reduction={c, e, f} permutation={b, d}

One spatial case is an exact block computation and stays shardable: a single window covering
the whole unpadded-at-the-front input dim (output size 1, ``H == KH``, ``lo == 0``). The window
factor is then a plain reduction: each device convolves its slice of the rows with the matching
kernel rows and the partial sums add up.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .factors import PERMUTATION, REDUCTION
from .cotangents import call, fit
from .indexing import place
from .registry import define_vjp, register_op
from .windows import Window


def _params(x: Aval, w: Aval, stride, padding):
    stride = preconditions.int_tuple("conv2d", "stride", stride, 2)
    if any(s < 1 for s in stride):
        raise ValueError(f"conv2d: stride {stride} must be >= 1")
    try:
        pads = tuple(tuple(int(v) for v in p) for p in padding)
    except TypeError:
        raise ValueError(f"conv2d: padding must be ((lo, hi), (lo, hi)), got {padding!r}") from None
    if len(pads) != 2 or any(len(p) != 2 for p in pads) or any(v < 0 for p in pads for v in p):
        raise ValueError(f"conv2d: padding {padding!r} must be two non-negative (lo, hi) pairs")
    return stride, pads


def _out_spatial(x_shape, w_shape, stride, pads) -> tuple[int, int]:
    return tuple((x_shape[2 + k] + sum(pads[k]) - w_shape[2 + k]) // stride[k] + 1 for k in range(2))


def _conv_eval(*avals, stride, padding, **_):
    preconditions.arity("conv2d", avals, 2)
    x, w = avals
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d: x (NCHW) and w (OIHW) must have rank 4, got {x} and {w}")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"conv2d: x has {x.shape[1]} input channels (dim 1) but w expects {w.shape[1]}")
    stride, pads = _params(x, w, stride, padding)
    for k, name in enumerate("HW"):
        if x.shape[2 + k] + sum(pads[k]) < w.shape[2 + k]:
            raise ValueError(
                f"conv2d: padded input {name} = {x.shape[2 + k]}+{sum(pads[k])} is smaller than the kernel's {w.shape[2 + k]}"
            )
    oh, ow = _out_spatial(x.shape, w.shape, stride, pads)
    return (Aval((x.shape[0], w.shape[0], oh, ow), np.result_type(x.dtype, w.dtype)),)


def _conv_kernel(x, w, *, stride, padding, **_):
    (sh, sw), ((top, bottom), (left, right)) = stride, padding
    xp = np.pad(np.asarray(x), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _, hp, wp = xp.shape
    o, _, kh, kw = np.shape(w)
    oh, ow = max((hp - kh) // sh + 1, 0), max((wp - kw) // sw + 1, 0)
    out = np.zeros((n, o, oh, ow), np.result_type(np.asarray(x).dtype, np.asarray(w).dtype))
    if not (oh and ow):  # an empty row block of a halo run (ops/windows.py): no window fits
        return (out,)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j])
    return (out,)


def conv2d_rule(in_avals, out_avals, *, stride, padding, **_):
    x, w = in_avals
    out = out_avals[0]
    b = RuleBuilder([x.shape, w.shape], [out.shape])
    b.add([0, None], [0], x.shape[0])
    exact_window: set[str] = set()
    for d in (2, 3):
        num_windows, window, remaining = out.shape[d], w.shape[d], x.shape[d]
        added = []

        def spatial(size: int, contracting: bool) -> None:
            nonlocal remaining
            size = min(remaining, size)
            if size > 1:
                if contracting:
                    added.append(("w", b.add([d, d], [None], size, REDUCTION)))
                else:
                    added.append(("n", b.add([d, None], [d], size, PERMUTATION)))
                remaining //= size

        if num_windows >= window:
            spatial(num_windows, False)
            spatial(window, True)
        else:
            spatial(window, True)
            spatial(num_windows, False)
        if num_windows == 1 and x.shape[d] == window and padding[d - 2][0] == 0:
            exact_window.update(f for kind, f in added if kind == "w")
    b.add([1, 1], [None], w.shape[1], REDUCTION)
    b.add([None, 0], [1], w.shape[0])
    rule = b.build()
    # Spatial factors only steer propagation, except a whole-dim window (see the module doc).
    spatial = {f for dims in rule.tensors for d in (2, 3) for f in dims[d]}
    return replace(rule, inexact=rule.inexact | frozenset(spatial - exact_window))


def _conv_windows(in_avals, out_avals, *, stride, padding, **_):
    """Result row ``o`` of each spatial dim reads input rows ``o * stride - lo`` onwards, as
    many as the kernel has taps (the rows before 0 and past the end are the zero padding)."""
    x, w = in_avals
    return tuple(Window(0, d, d, w.shape[d], int(stride[d - 2]), -int(padding[d - 2][0])) for d in (2, 3))


def _conv_window_params(params: dict, in_shapes, out_shapes, local) -> dict:
    """On a row block: the block's own edge padding (zero inside the tensor) and stride."""
    padding = [tuple(p) for p in params["padding"]]
    stride = list(params["stride"])
    for d, lw in local.items():
        padding[d - 2], stride[d - 2] = (lw.lo, lw.hi), lw.stride
    return {**params, "padding": tuple(padding), "stride": tuple(stride)}


register_op(
    "conv2d",
    _conv_eval,
    _conv_kernel,
    conv2d_rule,
    windows=_conv_windows,
    window_params=_conv_window_params,
    doc="2-D convolution, x NCHW, w OIHW, `stride` (sh, sw), zero `padding` ((top, bottom), (left, right))",
)


# -- derivative: the kernel's window loop, transposed -------------------------------------------
def _conv_vjp(ct, x, w, *, out, stride, padding, **_):
    """Per kernel tap (i, j), as the kernel computes it: the input window the tap saw (a strided
    slice of the padded input) meets the result's cotangent. The kernel's cotangent at the tap is
    their contraction over batch and positions; the input's is the cotangent times the tap's
    weights, put back where the window came from (``place``), summed over taps, unpadded.
    Only slices, pads and contractions: exact for integer values, sharded like any of them."""
    (sh, sw), ((top, bottom), (left, right)) = stride, padding
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = ct.shape[2], ct.shape[3]
    padded = (n, c, h + top + bottom, wd + left + right)

    def tap(i, j):
        return (0, 0, i, j), (n, c, i + sh * (oh - 1) + 1, j + sw * (ow - 1) + 1), (1, 1, sh, sw)

    def input_ct():
        total = None
        for i in range(kh):
            for j in range(kw):
                w_ij = call("reshape", call("slice", w, start=(0, 0, i, j), limit=(o, c, i + 1, j + 1)), new_shape=(o, c))
                g = call("dot_general", ct, w_ij, contracting=((1,), (0,)), batch=((), ()))  # [n, oh, ow, c]
                g = place(call("transpose", g, perm=(0, 3, 1, 2)), padded, tap(i, j)[0], tap(i, j)[2])
                total = g if total is None else total + g
        return fit(call("slice", total, start=(0, 0, top, left), limit=(n, c, top + h, left + wd)), x)

    def kernel_ct():
        xp = call("pad", x, widths=((0, 0), (0, 0), (top, bottom), (left, right)), padding_value=np.zeros((), x.dtype))
        taps = []
        for i in range(kh):
            for j in range(kw):
                start, limit, strides = tap(i, j)
                window = call("slice", xp, start=start, limit=limit, strides=strides)  # [n, c, oh, ow]
                g = call("dot_general", ct, window, contracting=((0, 2, 3), (0, 2, 3)), batch=((), ()))  # [o, c]
                taps.append(call("reshape", g, new_shape=(o, c, 1)))
        g = taps[0] if len(taps) == 1 else call("concatenate", *taps, axis=2)
        return fit(call("reshape", g, new_shape=(o, c, kh, kw)), w)

    return (input_ct, kernel_ct)


define_vjp("conv2d", _conv_vjp)
