"""placement_group_for on a real local 2-node cluster: one bundle per node, on different nodes."""

import pytest

from simshard.sharding.mesh import Mesh
from simshard.runtime.ray.nodes import PlacementError, actor_options, device_nodes, node_plan, placement_group_for, remove

pytestmark = pytest.mark.ray_cluster


def test_host_axis_bundles_land_on_different_nodes(shared_two_node_cluster):
    import ray

    mesh = Mesh({"host": 2, "x": 2})
    plan = node_plan(mesh, ("host",), cpus_per_device=0.25)
    pg = placement_group_for(plan, timeout=20)
    try:
        where = device_nodes(plan, pg)
        assert where[0] == where[1] and where[2] == where[3]
        assert where[0] != where[2]
        assert {where[0], where[2]} == {n["NodeID"] for n in ray.nodes() if n.get("Alive")}

        @ray.remote
        def node_id():
            return ray.get_runtime_context().get_node_id()

        # an actor-like task pinned by actor_options runs on its device's node
        opts = actor_options(plan, pg, 3)
        assert ray.get(node_id.options(**opts).remote(), timeout=20) == where[3]
    finally:
        remove(pg)


def test_too_many_nodes_refused_at_once(shared_two_node_cluster):
    plan = node_plan(Mesh({"host": 3, "x": 1}), ("host",), cpus_per_device=0.5)
    with pytest.raises(PlacementError, match="needs 3 nodes .* has 2 alive nodes"):
        placement_group_for(plan, timeout=5)
