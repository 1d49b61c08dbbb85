"""docs/ops.md is the registry's table, regenerated: `python -m simshard.ops.table > docs/ops.md`."""

from pathlib import Path

from simshard.ops import OPS
from simshard.ops import table

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_committed_table_matches_the_registry():
    assert DOC.read_text() == table.render(), "docs/ops.md is stale: run `python -m simshard.ops.table > docs/ops.md`"


def test_every_op_has_an_example_row():
    assert set(table.EXAMPLES) == set(OPS)
    assert [r[0] for r in table.rows()] == sorted(OPS)
    assert all(call and rule for _, _, call, rule in table.rows())


def test_main_prints_the_table(capsys):
    table.main()
    assert capsys.readouterr().out == table.render()
