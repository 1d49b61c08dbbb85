"""pyproject.toml lists every package, so a non-editable install has all of simshard."""

import pytest

tomllib = pytest.importorskip("tomllib")
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "simshard").rglob("__init__.py")}
    for folder in ("runtime", "programs"):  # mapped folders: simshard.runtime, simshard.runtime.wire, ...
        found |= {".".join(("simshard", folder, *p.parent.relative_to(ROOT / folder).parts))
                  for p in (ROOT / folder).rglob("__init__.py")}
    assert set(config["packages"]) == found
    assert config["package-dir"]["simshard.runtime"] == "runtime"
    assert config["package-dir"]["simshard.programs"] == "programs"
