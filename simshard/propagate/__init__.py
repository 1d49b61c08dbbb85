"""Automatic sharding propagation, Shardy's algorithm (``../shared/research/shardy.md`` §b).

Layers, bottom up (each its own module):

* :mod:`.axis_math` — prefix / overlap / merge arithmetic on axes and sub-axes;
* :mod:`.projection` — tensor shardings <-> per-factor axis lists (sub-axis splitting with gcd,
  overflow axes, back-projection merging sub-axes);
* :mod:`.basic` — longest common prefix per factor, conflict truncation, prefix-only expansion;
* :mod:`.aggressive` — per-tensor resolution and cross-factor ordering;
* :mod:`.engine` — one run over the whole program (worklist, meshes, function results);
* :mod:`.op_priority` — the five op-priority stages;
* :mod:`.user_priority` — user priorities as the outer loop;
* :mod:`.pipeline` — import / export steps of Shardy's propagation pipeline;
* :mod:`.provenance` — where each dimension's axes came from;
* :mod:`.driver` — ``propagate`` / ``explain`` on a :class:`~simshard.ir.Program`.
"""

from .direction import Direction
from .driver import STRATEGIES, PropagationInfo, explain, propagate, propagation_info

__all__ = ["Direction", "PropagationInfo", "STRATEGIES", "explain", "propagate", "propagation_info"]
