"""What numpy calls on a Tracer do: the lowering to registry ops, and ``x.at``.

``trace`` starts every trace with this module as its ``array_methods``; ``Tracer`` (in ``state``)
forwards ``__array_ufunc__``, ``__array_function__``, indexing, ``astype`` and ``at`` through it.
So the array type sits at the bottom of tracing and the numpy semantics above it, one way.
"""

from __future__ import annotations

from .lowering import array_function, astype, getitem, ufunc
from .scatter import IndexUpdateHelper as at

__all__ = ["array_function", "astype", "at", "getitem", "ufunc"]
