"""cluster/example-cluster.yaml is a config `ray up` accepts (Ray's own schema, after defaults)."""

import copy
from pathlib import Path

import pytest

CONFIG = Path(__file__).parent.parent.parent / "cluster" / "example-cluster.yaml"


def test_example_cluster_config_validates_against_ray_schema():
    yaml = pytest.importorskip("yaml")
    util = pytest.importorskip("ray.autoscaler._private.util")  # what `ray up` runs first
    cfg = yaml.safe_load(CONFIG.read_text())
    prepared = util.prepare_config(copy.deepcopy(cfg))
    util.validate_config(prepared)
    assert cfg["provider"]["type"] == "local"
    assert cfg["max_workers"] == len(cfg["provider"]["worker_ips"])
    assert any("--port=6379" in c for c in cfg["head_start_ray_commands"])
    assert any("$RAY_HEAD_IP:6379" in c for c in cfg["worker_start_ray_commands"])
