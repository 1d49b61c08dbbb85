"""node_plan: mesh axes to cluster nodes (pure planning; no Ray started here)."""

import pytest

from simshard.errors import ShardingError
from simshard.sharding.mesh import Mesh
from simshard.runtime.ray.nodes import PlacementError, check_fits, node_plan


def _shares_node_iff_same_node_coords(mesh, plan):
    idx = [mesh.axis_names.index(a) for a in plan.node_axes]
    for a in mesh.device_ids:
        for b in mesh.device_ids:
            same = all(mesh.coords(a)[i] == mesh.coords(b)[i] for i in idx)
            assert plan.same_node(a, b) == same, (a, b)


def test_host_axis_outer_crosses_nodes():
    mesh = Mesh({"host": 2, "x": 4})
    plan = node_plan(mesh, ("host",), cpus_per_device=0.25)
    assert plan.num_nodes == 2 and plan.devices_per_node == 4
    assert plan.nodes == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert plan.node_coords == ((0,), (1,))
    assert [plan.bundle_index(d) for d in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert plan.bundles == ({"CPU": 1.0}, {"CPU": 1.0})
    assert plan.strategy == "STRICT_SPREAD"
    _shares_node_iff_same_node_coords(mesh, plan)
    assert plan.describe().splitlines()[1] == "node 1 (host=1): devices 4, 5, 6, 7 [CPU 1]"


@pytest.mark.parametrize(
    "axes, node_axes, nodes",
    [
        ({"host": 2, "x": 2, "y": 2}, ("host",), 2),
        ({"host": 2, "x": 2, "y": 2}, ("host", "x"), 4),
        ({"host": 2, "x": 2, "y": 2}, ("x",), 2),  # an inner axis may cross nodes too
        ({"host": 2, "x": 2, "y": 2}, ("x", "host"), 4),  # order given does not matter: mesh order
        ({"host": 2, "x": 2, "y": 2}, (), 1),
        ({"host": 2, "x": 2, "y": 2}, ("host", "x", "y"), 8),  # one device per node
        ({"pod": 3, "host": 2, "d": 4}, ("pod", "host"), 6),
        ({"host": 1, "d": 5}, ("host",), 1),
    ],
)
def test_devices_share_node_exactly_when_node_coords_agree(axes, node_axes, nodes):
    mesh = Mesh(axes)
    plan = node_plan(mesh, node_axes, cpus_per_device=0.5)
    assert plan.num_nodes == nodes
    assert sorted(d for n in plan.nodes for d in n) == list(range(mesh.size))
    assert all(len(n) == mesh.size // nodes for n in plan.nodes)
    assert all(b == {"CPU": 0.5 * mesh.size / nodes} for b in plan.bundles)
    _shares_node_iff_same_node_coords(mesh, plan)
    # node index is row-major over the node axes (mesh order)
    for i, nc in enumerate(plan.node_coords):
        d = plan.nodes[i][0]
        assert tuple(mesh.coords(d)[mesh.axis_names.index(a)] for a in plan.node_axes) == nc


def test_permuted_device_ids_follow_coordinates_not_ids():
    mesh = Mesh({"host": 2, "x": 2}, device_ids=[3, 1, 0, 2])
    plan = node_plan(mesh, "host", cpus_per_device=1)
    assert plan.nodes == ((3, 1), (0, 2))
    assert plan.bundle_index(0) == 1 and plan.bundle_index(3) == 0


def test_fractional_sums_round_to_ray_resolution_and_extra_resources():
    plan = node_plan(Mesh({"host": 2, "x": 8}), cpus_per_device=0.1, resources_per_device={"memory": 2**20, "gpu_sim": 0.5})
    assert plan.bundles[0] == {"CPU": 0.8, "memory": 8 * 2**20, "gpu_sim": 4.0}


@pytest.mark.parametrize(
    "kwargs, rule, words",
    [
        (dict(node_axes=("host",)), "unknown-axis", 'node_axes names axis "host", which is not in mesh @mesh (axes: x, y)'),
        (dict(node_axes=("x", "x")), "duplicate-axis", "appears twice in node_axes"),
        (dict(node_axes=("x",), cpus_per_device=0), "invalid-resources", "zero resources"),
        (dict(node_axes=("x",), cpus_per_device=-1), "invalid-resources", ">= 0"),
        (dict(node_axes=("x",), cpus_per_device=1.5), "invalid-resources", "fractional amounts only below 1"),
        (dict(node_axes=("x",), strategy="RANDOM"), "invalid-strategy", "STRICT_SPREAD"),
        (dict(node_axes=("x",), resources_per_device={"CPU": 1}), "invalid-resources", "cpus_per_device"),
        (dict(node_axes=("x",), cpus_per_device=1, cpus_per_node=2), "node-too-small",
         "each node holds 4 devices of mesh @mesh (node_axes ('x',)) and needs 4 x 1 = 4 CPUs, but a node has 2"),
    ],
)
def test_errors_name_the_problem(kwargs, rule, words):
    with pytest.raises(ShardingError) as e:
        node_plan(Mesh({"x": 2, "y": 4}), **kwargs)
    assert e.value.rule == rule and words in str(e.value)
    assert isinstance(e.value, ValueError)


def test_cpus_per_node_enough_is_accepted():
    plan = node_plan(Mesh({"x": 2, "y": 4}), "x", cpus_per_device=0.5, cpus_per_node=2)
    assert plan.cpus_per_node == 2.0


def test_unknown_device():
    plan = node_plan(Mesh({"host": 2}), cpus_per_device=1)
    with pytest.raises(ShardingError, match="device 7 is not in mesh"):
        plan.bundle_index(7)


def test_check_fits_counts_nodes():
    plan = node_plan(Mesh({"host": 2, "x": 2}), cpus_per_device=1)  # 2 nodes x 2 CPUs
    check_fits(plan, [{"CPU": 2.0}, {"CPU": 4.0}])
    with pytest.raises(PlacementError, match=r"needs 2 nodes .* has 1 alive nodes"):
        check_fits(plan, [{"CPU": 8.0}])
    with pytest.raises(PlacementError, match="of which 1 fit"):
        check_fits(plan, [{"CPU": 2.0}, {"CPU": 1.0}])
    packed = node_plan(Mesh({"host": 2, "x": 2}), cpus_per_device=1, strategy="PACK")
    check_fits(packed, [{"CPU": 8.0}])  # one machine stands in for both nodes
    with pytest.raises(PlacementError, match="no node"):
        check_fits(packed, [{"CPU": 1.0}])


def test_docs_cluster_md_examples_run_and_links_exist():
    import doctest
    import re
    from pathlib import Path

    docs = Path(__file__).parent.parent.parent / "docs"
    text = (docs / "cluster.md").read_text()
    source = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    test = doctest.DocTestParser().get_doctest(source, {}, "cluster.md", "cluster.md", 0)
    assert len(test.examples) >= 5
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    for link in re.findall(r"\]\((\.\./[^)]+)\)", text):
        assert (docs / link).exists(), link
