"""Program transformations over traced functions, with JAX's spellings: reverse mode (``grad``,
``value_and_grad``, ``vjp``), forward mode (``jvp``), batching (``vmap``) and
rematerialisation (``checkpoint``).

They run inside a trace (``ss.jit``, ``ss.run``) and record ordinary ops of the registry, so
propagation gives cotangents their shardings and the partitioner places the gradient sums like
any other (all-reduce, or reduce-scatter where the parameter is sharded). Each op's derivative is
its registry entry's ``vjp``; called outside a trace, they trace and evaluate with numpy.
"""

from .api import checkpoint, grad, jvp, value_and_grad, vjp
from .batching import vmap
from . import control_batching  # noqa: F401  (registers the batching rules of scan, switch and while)

__all__ = ["checkpoint", "grad", "jvp", "value_and_grad", "vjp", "vmap"]
