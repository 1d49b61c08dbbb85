"""Tracing: a plain numpy function run on tracer arrays becomes a ``Program``.

* ``tracer``: the ``Tracer`` array, ``bind`` (record one op), ``trace`` and ``jit``;
* ``lowering``: numpy's functions and ufuncs, with numpy's semantics, as registry ops;
* ``explicit``: JAX's explicit mode (sharding in types), each op typed as it is bound;
* ``context``: the ambient mesh (``set_mesh`` / ``use_mesh``);
* ``interpret``: evaluate a Program on whole arrays, the single-device reference.
"""

from .context import get_mesh, set_mesh, use_mesh
from .interpret import evaluate
from .tracer import ShapeDtype, TraceError, Tracer, bind, jit, name, trace

__all__ = ["ShapeDtype", "TraceError", "Tracer", "bind", "evaluate", "get_mesh", "jit", "name", "set_mesh", "trace",
           "use_mesh"]
