"""A library program on the Ray backend (one actor per device): the same bits and the same
communication records as the local backend. One run only: Ray and its actors are slow to start.
The ring is the representative: a manual region (its body travels to the actors with
cloudpickle) of 14 collective-permutes; automatic programs on Ray are tests/runtime/test_ray.py's."""

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from simshard import programs  # noqa: E402




def test_the_ring_on_ray_as_on_the_local_backend(ray_session, run_strategy):
    res = programs.load("shard_map_ring").run("ring", backend="ray", retries=1)
    local = run_strategy("shard_map_ring", "ring")
    assert res.verify.bitwise, str(res.verify)
    out, ref = np.asarray(res.outputs), np.asarray(local.outputs)
    assert out.dtype == ref.dtype and out.tobytes() == ref.tobytes()
    assert res.comm.records == local.comm.records
    assert res.execution.controller_calls  # set only by the Ray backend
