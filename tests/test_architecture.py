"""The layers of docs/architecture.md hold: import-linter checks the contracts in pyproject.toml.

runtime/ and programs/ install as simshard.runtime and simshard.programs (package-dir), which
import-linter cannot see in a checkout; the test lays the three folders out as they install, in
a temporary directory, and lints that copy.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
pytest.importorskip("importlinter")


@pytest.fixture(scope="module")
def installed_view(tmp_path_factory) -> Path:
    top = tmp_path_factory.mktemp("view")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "simshard", top / "simshard", ignore=ignore)
    shutil.copytree(ROOT / "runtime", top / "simshard" / "runtime", ignore=ignore)
    shutil.copytree(ROOT / "programs", top / "simshard" / "programs", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", top / "pyproject.toml")
    return top


def lint(top: Path, config: Path) -> subprocess.CompletedProcess:
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", script, str(config), "--no-cache"], cwd=top,
                          env={"PYTHONPATH": str(top), "PATH": ""}, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept(installed_view):
    run = lint(installed_view, installed_view / "pyproject.toml")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout and "4 kept" in run.stdout, run.stdout


def test_a_cycle_breaks_the_contract(installed_view, tmp_path):
    """The check can fail: a module of the sharding model that imports the tracer is refused."""
    view = tmp_path / "broken"
    shutil.copytree(installed_view, view)
    axes = view / "simshard" / "sharding" / "axes.py"
    axes.write_text(axes.read_text() + "\n\ndef _late():\n    from ..tracing import tracer  # noqa\n")
    run = lint(view, view / "pyproject.toml")
    assert run.returncode == 1
    assert "simshard.sharding is not allowed to import simshard.tracing" in run.stdout
    assert "simshard.sharding.axes -> simshard.tracing.tracer" in run.stdout
