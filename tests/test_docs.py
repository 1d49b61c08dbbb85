"""The examples in docs/ are doctests: every `>>>` line in a ```python block runs, in order."""

import doctest
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", ["sharding-model.md", "programs.md", "planner.md", "verification.md", "cost-model.md",
                                  "runtime.md", "user-guide.md", "tutorial-megatron-fsdp.md",
                                  "transformations.md", "estimate.md", "dtensor.md", "fhe.md", "dtypes.md"])
def test_doc_examples_run(page, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = (DOCS / page).read_text()
    source = "\n".join(BLOCK.findall(text))
    test = doctest.DocTestParser().get_doctest(source, {}, page, page, 0)
    assert len(test.examples) > 3
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
