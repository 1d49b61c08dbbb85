import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _mapped_from_this_checkout(package: str, folder: str) -> None:
    """Make ``simshard.<package>`` this checkout's top-level ``<folder>/``.

    pyproject.toml maps ``runtime/`` to ``simshard.runtime`` and ``programs/`` to
    ``simshard.programs`` (package-dir), which only an install sees. Running from a checkout with
    ``PYTHONPATH=<checkout>`` finds ``simshard`` here but, with an editable install of another
    checkout in the venv, would take the mapped packages from that other checkout. Loading them
    from here first keeps every test on this checkout's code; when the installed mapping already
    points here, nothing changes.
    """
    import simshard

    name = f"simshard.{package}"
    init = ROOT / folder / "__init__.py"
    if Path(simshard.__file__).resolve().parent != (ROOT / "simshard").resolve() or name in sys.modules:
        return
    found = importlib.util.find_spec(name)
    if found is not None and found.origin and Path(found.origin).resolve() == init.resolve():
        return
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    setattr(simshard, package, module)


_mapped_from_this_checkout("runtime", "runtime")
_mapped_from_this_checkout("programs", "programs")

# ss.run defaults to the Ray backend; the suite runs the local one unless a test asks for Ray
# (tests/runtime/test_ray.py checks the default itself).
os.environ.setdefault("SIMSHARD_BACKEND", "local")

# Test modules in subfolders import helpers that live here (casedata); make this folder importable.
sys.path.insert(0, str(Path(__file__).parent))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    """The backend's default local Ray (private, quiet, loopback only, 2 CPUs), started once per
    test process for the tests that ask for it, or the one already initialised."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        from simshard.runtime.ray_backend import ensure_ray

        ensure_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()
