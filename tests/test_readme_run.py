"""README's ss.run example prints what the README says it prints."""

import contextlib
import io
import re
from pathlib import Path

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_readme_run_example_output_is_real():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    code = next(b for b in blocks if "ss.run(" in b)
    expected = re.search(r"```text\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    norm = lambda t: [line.rstrip() for line in t.strip().splitlines() if line.strip()]  # noqa: E731
    assert norm(out.getvalue()) == norm(expected)
