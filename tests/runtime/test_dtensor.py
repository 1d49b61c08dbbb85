"""``ss.dtensor``: DTensor's vocabulary over device arrays, checked against the DTensor oracle.

Layout cases (tests/data/dtensor_layout.json): ``distribute_tensor`` gives every rank the global
indices DTensor gave it, ``to_local`` / ``full_tensor`` / ``from_local`` round-trip. Redistribute
cases (dtensor_redistribute.json): ``redistribute`` runs the case's placements as they are, on
the devices, the values move bit for bit, and the bytes received are no more than DTensor's.
"""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from casedata import load_cases
from partition.test_conformance_dtensor import dtensor_best
from simshard.errors import ShardingError

dt = ss.dtensor
LAYOUT = load_cases("dtensor_layout.json")
REDIST = load_cases("dtensor_redistribute.json")


def mesh_of(case) -> ss.Mesh:
    return ss.Mesh(list(zip(case["mesh_dim_names"], case["mesh_shape"])))


def bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.dtype(f"u{a.dtype.itemsize}"))


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


def exact(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)).astype(np.float32)


# -- layouts ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", LAYOUT, ids=[c["id"] for c in LAYOUT])
def test_distribute_tensor_gives_each_rank_dtensors_shard(case):
    mesh = mesh_of(case)
    shape = tuple(case["global_shape"])
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    d = dt.distribute_tensor(x, mesh, [ss.parse_placement(p) for p in case["placements"]])
    assert isinstance(d, ss.runtime.DeviceArray) and d.device_mesh == mesh
    assert [str(p) for p in d.placements] == [str(ss.parse_placement(p).normalized(len(shape))) for p in case["placements"]]
    for r in case["ranks"]:
        local = d.to_local(r["rank"])
        assert local.shape == tuple(r["local_shape"])
        if r["global_indices_per_dim"] is not None and all(ix is not None for ix in r["global_indices_per_dim"]):
            assert same_bits(local, x[np.ix_(*r["global_indices_per_dim"])])
    assert same_bits(d.full_tensor(), x)
    back = dt.DTensor.from_local(d.to_local(), mesh, case["placements"])  # placement text, the shape read off
    assert back.shape == shape and same_bits(back.full_tensor(), x)


# -- redistribute -----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", REDIST, ids=[c["id"] for c in REDIST])
def test_redistribute_case_runs_on_the_devices(case):
    mesh = mesh_of(case)
    shape = tuple(case["global_shape"])
    x = exact(shape)
    d = dt.distribute_tensor(x, mesh, case["src"])  # the placements as DTensor spells them, a list of text
    e = d.redistribute(placements=case["dst"])
    want = ss.layout(e.spec, shape).shard(x)
    for dev, local in e.to_local().items():
        if not e.spec.placements or not any(isinstance(p, ss.Partial) for p in e.placements):
            assert same_bits(local, want[dev]), f"device {dev}"
    assert same_bits(np.asarray(e), x)  # assembled (pending reductions combined in canonical order)
    assert same_bits(e.full_tensor(), x)
    comm = e.last_comm
    assert all(r.bytes_received == r.min_bytes for r in comm.records)
    if not case["error"]:
        assert comm.total_received <= dtensor_best(case) + 1e-9


def test_nested_uneven_layout_no_sharding_states_runs():
    """The issue's case: [Shard(0), Shard(0)] of a (10, 3) tensor over 2x4 holds rows 2,2,1,0 per dp
    half, which no tensor-dimension sharding expresses; it distributes, redistributes and gathers."""
    mesh = dt.init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    x = exact((10, 3))
    d = dt.distribute_tensor(x, mesh, "[S(0), S(0)]")
    assert [d.to_local(r).shape[0] for r in range(8)] == [2, 2, 1, 0, 2, 2, 1, 0]
    with pytest.raises(ShardingError, match="not-expressible"):
        ss.Sharding.from_dtensor(d.spec, x.shape)
    e = d.redistribute(placements=[dt.Replicate(), dt.Shard(1)])
    assert same_bits(e.to_local(5), x[:, 1:2])
    assert same_bits(e.redistribute(placements=d.placements).to_local(6), x[9:10])


def test_partial_distributes_and_reduces_exactly():
    mesh = ss.Mesh({"x": 4})
    x = exact((8, 2))
    d = dt.distribute_tensor(x, mesh, [dt.Partial()])
    # the value on the first device, the identity (-0.0) elsewhere: no division, no rounding
    assert same_bits(d.to_local(0), x) and same_bits(d.to_local(3), np.full_like(x, -0.0))
    s = d.redistribute(placements=[dt.Shard(0)])
    assert [r.kind for r in s.last_comm.records][:1] == ["reduce_scatter"]
    assert same_bits(s.to_local(1), x[2:4])


def test_redistribute_to_partial_is_local():
    mesh = ss.Mesh({"x": 2, "y": 2})
    x = exact((4, 4))
    p = dt.distribute_tensor(x, mesh, "[R, S(1)]").redistribute(placements="[P, S(1)]")
    assert not p.last_comm.records and same_bits(p.full_tensor(), x)


# -- from_local -------------------------------------------------------------------------------------
def test_from_local_names_the_shard_that_does_not_fit():
    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x = exact((10, 3))
    shards = dt.distribute_tensor(x, mesh, "[S(0), S(0)]").to_local()
    shards[3] = np.zeros((2, 3), np.float32)  # DTensor gives device 3 no rows
    with pytest.raises(ShardingError, match=r"device 3 \(mesh coordinates \{'dp': 0, 'tp': 3\}\) holds a shard of shape \(2, 3\)"):
        dt.DTensor.from_local(shards, mesh, "[S(0), S(0)]")
    with pytest.raises(ShardingError, match=r"device 2 .*\(and devices \[3, 6, 7\]\) .* gives it \(1, 3\)"):
        dt.DTensor.from_local([np.zeros((2, 3), np.float32)] * 8, mesh, "[S(0), S(0)]", shape=(10, 3))


def test_from_local_with_a_sequence_and_a_given_shape():
    mesh = ss.Mesh({"x": 4})
    x = exact((6, 2))
    blocks = [x[0:2], x[2:4], x[4:6], x[6:6]]
    d = dt.DTensor.from_local(blocks, mesh, [dt.Shard(0)], shape=(6, 2))
    assert d.shape == (6, 2) and same_bits(d.full_tensor(), x) and d.to_local(3).shape == (0, 2)
    with pytest.raises(ShardingError, match="3 shards for 4 devices"):
        dt.DTensor.from_local(blocks[:3], mesh, [dt.Shard(0)])


def test_from_local_given_one_array_says_it_wants_every_devices_shard():
    mesh = ss.Mesh({"x": 8})
    with pytest.raises(ShardingError, match=r"from_local: one array of shape \(13, 88\) where every device's shard "
                                            r"was expected: .*8 arrays.*distribute_tensor"):
        dt.DTensor.from_local(np.ones((13, 88)), mesh, [dt.Shard(0)])
    with pytest.raises(ShardingError, match=r"one array of shape \(\)"):
        dt.DTensor.from_local(np.float32(1), mesh, [dt.Replicate()])


def test_errors_are_sharding_errors_naming_the_call():
    mesh = ss.Mesh({"x": 2, "y": 2})
    with pytest.raises(ShardingError, match="distribute_tensor: 1 placements"):
        dt.distribute_tensor(np.zeros((4, 4)), mesh, [dt.Shard(0)])
    with pytest.raises(ShardingError, match="distribute_tensor: .*dim 2"):
        dt.distribute_tensor(np.zeros((4, 4)), mesh, [dt.Shard(2), dt.Replicate()])
    d = dt.distribute_tensor(np.zeros((4, 4)), mesh)
    assert d.placements == (dt.Replicate(), dt.Replicate())
    with pytest.raises(ShardingError, match="mesh-mismatch"):
        d.redistribute(ss.Mesh({"x": 4}), [dt.Shard(0)])
    with pytest.raises(ShardingError, match="unknown-device"):
        d.to_local(9)


def test_user_placement_runs():
    """A user placement (RaggedShard) distributes and redistributes like any other."""
    mesh = ss.Mesh({"x": 3})
    x = exact((12, 2))
    d = dt.distribute_tensor(x, mesh, [ss.RaggedShard(0, (1, 0, 3))])
    assert [d.to_local(r).shape[0] for r in range(3)] == [3, 0, 9]
    e = d.redistribute(placements=[dt.Shard(0)])
    assert same_bits(e.to_local(2), x[8:12]) and same_bits(e.full_tensor(), x)


def test_local_mesh_host_and_device_arrays_interoperate():
    """A DTensor whose layout a Sharding expresses is a DeviceArray a compiled program takes."""
    mesh = ss.Mesh({"x": 2, "y": 4})
    from simshard.runtime import LocalMesh

    devices = LocalMesh(mesh)
    x, w = exact((8, 16)), exact((16, 4), seed=1)
    a = dt.distribute_tensor(x, devices, "[S(0), R]")
    b = dt.distribute_tensor(w, devices, "[R, R]")
    res = devices.compile(lambda a, b: a @ b, a, b)(a, b)
    assert same_bits(res.outputs, x @ w)


# -- a user reduction: NormPartial ------------------------------------------------------------------
def pythagorean_parts():
    """Per device of a 2x2 mesh, partial 2-norms; every element has at most two non-zero
    contributions (3, 4 / 5, 12 / 6, 8 / 8, 15), so every association of the combine is exact."""
    z = np.zeros((4, 2), np.float32)
    parts = {d: z.copy() for d in range(4)}
    parts[0][0, 0], parts[1][0, 0] = 3, 4      # -> 5 (over y)
    parts[0][1, 1], parts[2][1, 1] = 5, 12     # -> 13 (over x)
    parts[1][2, 0], parts[3][2, 0] = 6, 8      # -> 10 (over x)
    parts[2][3, 1], parts[3][3, 1] = 8, 15     # -> 17 (over y)
    parts[3][3, 0] = 7                         # -> 7 (one contribution)
    return parts


def norm_of(parts) -> np.ndarray:
    return np.sqrt(sum(p.astype(np.float64) ** 2 for p in parts.values())).astype(np.float32)


@pytest.mark.parametrize("dst", ["[R, R]", "[S(0), R]", "[R, S(0)]", "[S(0), S(1)]", "[S(1), S(0)]"])
def test_norm_partial_reduces_like_a_built_in(dst):
    """Partial(norm2) on both mesh axes, redistributed to Replicate and to Shard: the planner's
    all-reduce / reduce-scatter combine the norms in canonical order, bit for bit numpy's norm."""
    mesh = ss.Mesh({"x": 2, "y": 2})
    norm = dt.NormPartial(2)
    assert str(norm) == "P(norm2)"
    parts = pythagorean_parts()
    d = dt.DTensor.from_local(parts, mesh, [norm, norm])
    want = norm_of(parts)
    assert same_bits(np.asarray(d), want)  # assembled in canonical order
    e = d.redistribute(placements=dst)
    kinds = {r.kind for r in e.last_comm.records}
    assert kinds and kinds <= {"all_reduce", "reduce_scatter"}
    assert all(r.bytes_received == r.min_bytes for r in e.last_comm.records)
    L = ss.layout(e.spec, want.shape)
    for dev, local in e.to_local().items():
        assert same_bits(local, want[np.ix_(*L.indices(dev))]), f"device {dev}"


def test_norm_partial_on_one_axis_and_in_a_program():
    mesh = ss.Mesh({"x": 2, "y": 2})
    norm = dt.NormPartial(2)
    parts = pythagorean_parts()
    # [S(0), P(norm2)]: rows split over x, each row block's norm pending over y
    blocks = {d: parts[d][:2] if mesh.coords(d)[0] == 0 else parts[d][2:] for d in range(4)}
    d = dt.DTensor.from_local(blocks, mesh, [dt.Shard(0), norm])
    assert d.shape == (4, 2)
    rows = d.redistribute(placements="[S(0), R]")
    assert same_bits(rows.to_local(1), norm_of({0: blocks[0], 1: blocks[1]}))
    assert {r.kind for r in rows.last_comm.records} == {"all_reduce"}
    # ss.run: a program input pending a norm is reduced before the first op reads it
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    res = ss.run(lambda a: a * 2 + 1, x, mesh=mesh, in_shardings=[norm, dt.Shard(1)])
    assert res.verify.bitwise and same_bits(res.outputs, x * 2 + 1)
    assert [r.kind for r in res.comm.records][:1] == ["all_reduce"]


def test_norm_partial_kinds():
    assert str(dt.NormPartial(1)) == "P(norm1)" and str(dt.NormPartial(float("inf"))) == "P(norm_inf)"
    mesh = ss.Mesh({"x": 2})
    d = dt.DTensor.from_local([np.float32([3, -4]), np.float32([-4, 3])], mesh, [dt.NormPartial(1)])
    assert same_bits(d.full_tensor(), np.float32([7, 7]))
    with pytest.raises(ShardingError, match="must be positive"):
        dt.NormPartial(0)
