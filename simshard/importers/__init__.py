"""Programs from other frameworks: ``from_jax`` (a jaxpr's primitives as ops of the registry) and
``from_torch`` (``torch.export``'s core ATen graph), each with the shardings its framework states.

jax and torch are optional (the ``jax`` and ``torch`` extras): imported only inside the functions
that need them, so ``import simshard`` never loads either.
"""

from .common import FrameworkOutputs, UnsupportedOpError
from .imported import ImportedFunction
from .jax_import import from_jax
from .torch_import import from_torch

__all__ = ["FrameworkOutputs", "ImportedFunction", "UnsupportedOpError", "from_jax", "from_torch"]
