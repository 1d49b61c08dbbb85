"""docs/explicit.md's examples run as doctests."""

import doctest
import re
from pathlib import Path

import simshard as ss

DOC = Path(__file__).parents[2] / "docs" / "explicit.md"


def test_explicit_doc_examples_run(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    source = "\n".join(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S))
    test = doctest.DocTestParser().get_doctest(source, {}, "explicit.md", "explicit.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    try:
        runner.run(test, out=report.append)
    finally:
        from simshard.tracing import context

        context._state.stack = []  # the page calls ss.set_mesh for the rest of the "session"
    assert runner.failures == 0, "".join(report)
    assert len(test.examples) > 10
    assert ss.get_abstract_mesh().empty
