"""docs/propagation.md: every `>>>` example in its ```python blocks runs, in order."""

import doctest
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "propagation.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_propagation_doc_examples_run():
    source = "\n".join(BLOCK.findall(PAGE.read_text()))
    test = doctest.DocTestParser().get_doctest(source, {}, PAGE.name, str(PAGE), 0)
    assert len(test.examples) > 15
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
