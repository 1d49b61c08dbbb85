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


def test_help_of_ss_run_shows_its_real_signature_and_import_stays_compiler_only():
    import inspect
    import subprocess
    import sys

    import simshard as ss
    from simshard.runtime.front import api

    params = inspect.signature(ss.run).parameters
    assert list(params)[:6] == ["f", "args", "mesh", "backend", "in_shardings", "out_shardings"]
    assert params["timeout"].default == 10.0 and params["backend_options"].kind is inspect.Parameter.VAR_KEYWORD
    assert inspect.signature(ss.run) == inspect.signature(api.run) and "verified bit for bit" in ss.run.__doc__
    assert "run" in dir(ss)
    probe = "import sys, simshard; assert 'simshard.runtime' not in sys.modules; from simshard import run; print(run.__name__)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "run\n"
