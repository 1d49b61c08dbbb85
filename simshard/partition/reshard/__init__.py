"""The reshard planner: ``plan_reshard(src, dst, shape, dtype)`` -> ``ReshardPlan``.

* ``plan``: ``ReshardPlan`` and its ``Step``s (bytes sent and received per device, the analytic
  minimum), layouts of shardings and their local shapes;
* ``atoms`` / ``greedy`` / ``realize``: the structured path (mesh axes cut into atoms, the next
  collective decided on atoms, each move checked and priced on the layouts);
* ``exchange``: the point-to-point path in which every device receives exactly what it lacks
  (``exchange_rounds``: its rounds; ``exchange_emit``: its instructions);
* ``planner``: ``plan_reshard``; ``same_mesh``, ``meshes`` (shardings on different meshes over
  the same devices), ``generic`` (layouts no sharding expresses, fewer devices): the plans it
  chooses between.
"""

from .exchange import plan_exchange
from .plan import ReshardPlan, Step, layout_of
from .planner import plain, plan_reshard
from .same_mesh import MAX_STEPS
from .meshes import translate

__all__ = ["MAX_STEPS", "ReshardPlan", "Step", "layout_of", "plain", "plan_exchange", "plan_reshard", "translate"]
