"""Arrays that live on the devices (``devices.put``, ``DeviceArray``): put and gathered back
exactly, taken and returned by compiled programs without passing through the driver, so a
training loop keeps its parameters on the devices; the same on a ``LocalMesh`` and a ``RayMesh``."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.runtime import DeviceArray, ExecutionError, LocalMesh
from simshard.sharding.layout import layout

from runtime_helpers import kill

MESH = ss.Mesh({"x": 2, "y": 4})


@pytest.fixture(scope="module", params=["local", "ray"])
def devices(request):
    if request.param == "local":
        yield LocalMesh(MESH)
        return
    pytest.importorskip("ray")
    request.getfixturevalue("ray_session")
    from simshard.runtime.ray.driver.mesh import RayMesh

    with RayMesh(MESH, devices_per_process=4) as rm:
        yield rm


def test_put_shards_once_and_gathers_back_exactly(devices):
    x = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    arr = devices.put(x, P("x", "y"))
    assert isinstance(arr, DeviceArray) and arr.shape == (8, 8) and arr.dtype == np.float32
    assert arr.sharding == ss.NamedSharding(MESH, P("x", "y")).to_sharding(2)
    blocks = layout(arr.sharding, x.shape).shard(x)
    for d in MESH.device_ids:  # each device holds its own block, nothing more
        assert np.array_equal(arr.shard(d), blocks[d]) and arr.shard(d).shape == (4, 2)
    assert np.asarray(arr).tobytes() == x.tobytes() and arr.gather().dtype == x.dtype
    whole = devices.put({"w": x}, None)["w"]  # a pytree; None: a whole copy on every device
    assert whole.sharding is None and np.array_equal(whole.shard(5), x)
    with pytest.raises(ss.ShardingError, match='put: leaf 0: axis "z"'):
        devices.put(x, P("z"))


def _step(w1, w2, x, y):
    """One SGD step of a ReLU MLP with a linear loss: integer-valued gradients, a power-of-two
    rate, so every value is exact in float64 whatever order the sharded sums take."""

    def loss(w1, w2):
        return np.sum(np.maximum(x @ w1, 0) @ w2 * y)

    g1, g2 = ss.grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 0.125 * g1, w2 - 0.125 * g2


def test_a_training_loop_keeps_its_parameters_on_the_devices(devices):
    w1, w2, x, y = ss.exact_inputs([(6, 16), (16, 4), (8, 6), (8, 4)], seed=3, dtype=np.float64)
    shardings = (P(None, "y"), P("y", None), P("x", None), P("x", None))
    params = devices.put((w1, w2), shardings[:2])
    batch = devices.put((x, y), shardings[2:])
    step = devices.compile(_step, *params, *batch, out_shardings=shardings[:2])
    want = (w1, w2)
    for _ in range(3):
        res = step(*params, *batch)
        params = res.arrays  # the new parameters, still on the devices
        want = _step(*want, x, y)
        assert all(isinstance(p, DeviceArray) for p in params)
        assert res.controller_calls.get("put", 0) == 0  # nothing went from the driver to the devices
    for got, expected in zip(params, want):
        assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()
    assert {r.kind for r in res.records} >= {"all_reduce"}


def test_a_device_array_sharded_otherwise_is_refused_naming_both(devices):
    x = np.ones((8, 6), np.float32)
    compiled = devices.compile(lambda a: a * 2, x, in_shardings=(P("x", None),))
    assert np.array_equal(compiled(devices.put(x, P("x", None))).outputs, x * 2)
    with pytest.raises(ValueError, match=r"input 0 .*sharded .*\"y\".* but the program takes it sharded .*\"x\""):
        compiled(devices.put(x, P("y", None)))


def test_outputs_stay_in_their_processes_until_no_handle_is_left(ray_session):
    import gc

    import ray

    from simshard.runtime.ray.driver.mesh import RayMesh

    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    with RayMesh(MESH, devices_per_process=8) as devices:
        double = devices.compile(lambda a: a * 2, x, in_shardings=(P("x", None),), out_shardings=P("x", None))
        kept = double(devices.put(x, P("x", None))).arrays
        again = double(kept)  # a kept output is the next run's input where it is: no put, no copy
        assert again.controller_calls.get("put", 0) == 0 and np.array_equal(again.outputs, x * 4)
        host, held_id = kept.shards[0].host, kept.shards[0].id
        assert np.array_equal(ray.get(host.fetch.remote([held_id]))[0], x[:4] * 2)
        del kept, again
        gc.collect()
        double(devices.put(x, P("x", None)))  # the mesh's next call on the host releases what nobody holds
        with pytest.raises(ray.exceptions.RayTaskError, match="no longer holds"):
            ray.get(host.fetch.remote([held_id]))


def test_an_array_its_process_let_go_of_is_refused_by_name_on_the_control_line(ray_session):
    """What the device process's ``run`` raises comes back on the driver's control line and is
    raised as it is; the mesh runs on afterwards."""
    import ray

    from simshard.runtime.ray.driver.mesh import RayMesh

    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    with RayMesh(MESH, devices_per_process=4) as devices:
        double = devices.compile(lambda a: a * 2, x, in_shardings=(P("x", None),))
        arr = devices.put(x, P("x", None))
        shard = arr.shards[0]
        ray.get(shard.host.release.remote([shard.id]))  # as if the driver had dropped it
        with pytest.raises(ValueError, match=rf"no longer holds \(id {shard.id}\)"):
            double(arr)
        res = double(devices.put(x, P("x", None)))
        before = dict(devices.calls)
        assert res.execution.control_plane == "sockets" and np.array_equal(res.outputs, x * 2)
        fetched = {k: v - before.get(k, 0) for k, v in devices.calls.items() if v != before.get(k, 0)}
        assert fetched == {"fetch": 2}  # one per process, on its control line: no Ray get
        assert res.shards(0)[0].flags.writeable  # the driver's own copy


def test_outputs_of_a_process_that_died_after_the_run_are_reported_lost_by_device(ray_session):
    import ray

    from simshard.runtime import DeviceLostError
    from simshard.runtime.ray.driver.mesh import RayMesh

    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    with RayMesh(MESH, devices_per_process=4) as devices:
        double = devices.compile(lambda a: a * 2, x, in_shardings=(P("x", None),))
        res = double(x)
        assert res.execution.control_plane == "sockets"
        kill(devices, 5)
        assert devices.lost() == [4, 5, 6, 7]
        assert np.array_equal(res.shards(0)[0], x[:4] * 2)  # the other process still has its own
        with pytest.raises(DeviceLostError, match="device 4's Ray actor died after the run") as err:
            res.shards(4)
        assert err.value.device == 4
        devices.repair()  # the dead process replaced: its outputs are not in the new one
        with pytest.raises(ExecutionError, match="its device was restarted since their run"):
            res.shards(4)


def test_outputs_read_after_their_mesh_was_closed_are_refused_saying_so(ray_session):
    """A run's outputs stay on the devices until read; once the mesh is closed (its processes
    killed) reading them says why there is nothing to read, instead of failing inside the fetch."""
    from simshard.runtime.ray.driver.mesh import RayMesh

    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    with RayMesh(MESH, devices_per_process=4) as devices:
        res = devices.compile(lambda a: a + 1, x, in_shardings=(P("x", None),))(x)
    with pytest.raises(ExecutionError, match="the mesh has been closed since their run"):
        res.shards(0)
