"""The program IR (``program``): immutable ops on global shapes, each value with its type and sharding.

Every later stage reads and writes this data: tracing builds a ``Program``, propagation gives
its values shardings, the partitioner turns it into per-device schedules.
"""

from .program import Aval, Eqn, Literal, Program, Value

__all__ = ["Aval", "Eqn", "Literal", "Program", "Value"]
