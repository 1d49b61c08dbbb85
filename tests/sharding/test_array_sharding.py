"""The FHE compiler's ArraySharding spelling (seed 003): ``{y, z, -1}`` text and integer axis
lists, parsed by simshard/sharding/syntax.py and built by ``Sharding.from_array_sharding``."""

import pytest

import simshard as ss
from simshard.errors import ShardingError
from simshard.sharding.syntax import parse_array_sharding

MESH = ss.Mesh({"x": 4, "y": 3, "z": 2})
EXPECTED = '<@mesh, [{"y"}, {"z"}, {}]>'


@pytest.mark.parametrize("spec", ["{y, z, -1}", "{1, 2, -1}", '{"y", "z", -1}', " {y,z,-1} ", ("y", "z", -1),
                                  [1, 2, -1], ("y", 2, None)])
def test_every_spelling_of_the_seeds_example_1(spec):
    s = ss.Sharding.from_array_sharding(MESH, spec)
    assert str(s) == EXPECTED
    assert ss.fhe_spec(MESH, spec) == s


def test_the_parser_gives_names_and_indices():
    assert parse_array_sharding("{y, z, -1}") == ("y", "z", -1)
    assert parse_array_sharding("{0, -1}") == (0, -1) and parse_array_sharding("{}") == ()


def test_text_in_either_spelling():
    assert str(ss.Sharding.from_text("{x, -1}", MESH)) == '<@mesh, [{"x"}, {}]>'
    assert ss.Sharding.from_text('<@mesh, [{"x"}, {}]>', MESH) == ss.Sharding.from_text("{0, -1}", MESH)


def test_accepted_as_in_shardings_of_a_run():
    import numpy as np

    x = np.arange(3 * 4 * 2, dtype=np.float64).reshape(3, 4, 2)
    res = ss.run(lambda a: a * 2, x, mesh=MESH, in_shardings=("{y, z, -1}",), backend="local")
    assert res.verify.bitwise and str(res.program.shardings[res.program.inputs[0]]) == EXPECTED


@pytest.mark.parametrize("spec, rule, match", [
    ("{y z}", "parse", "cannot parse array_sharding text at column 4"),
    ("{y, -2}", "invalid-spec", "dimension 1: axis index -2 is not an axis of the mesh .indices 0..2 for x, y, z"),
    ([3], "invalid-spec", "dimension 0: axis index 3 is not an axis"),
    ("{w, -1}", "unknown-axis", "dimension 0: axis 'w' is not an axis of the mesh .x, y, z."),
    ([1.5], "invalid-spec", "entry 1.5 must be an axis name, an axis index or -1"),
    ([True], "invalid-spec", "entry True must be"),
    (7, "invalid-spec", "text like {y, z, -1} or a list"),
])
def test_bad_specs_are_reported(spec, rule, match):
    with pytest.raises(ShardingError, match=match) as e:
        ss.Sharding.from_array_sharding(MESH, spec)
    assert e.value.rule == rule


def test_an_axis_twice_is_refused():
    with pytest.raises(ShardingError, match="y"):
        ss.Sharding.from_array_sharding(MESH, "{y, y, -1}")
