"""docs/scalax.md's examples are doctests."""

import doctest
import re
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "scalax.md"


def test_scalax_page_examples_run():
    source = "\n".join(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S))
    test = doctest.DocTestParser().get_doctest(source, {}, "scalax.md", str(DOC), 0)
    assert len(test.examples) >= 10
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
