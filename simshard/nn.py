"""``ss.nn``: array ops numpy does not have. ``conv2d`` is NCHW input by OIHW kernel."""

from __future__ import annotations

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
