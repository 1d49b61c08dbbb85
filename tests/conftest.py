import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _runtime_from_this_checkout() -> None:
    """Make ``simshard.runtime`` this checkout's top-level ``runtime/`` folder.

    pyproject.toml maps ``runtime/`` to ``simshard.runtime`` (package-dir), which only an install
    sees. Running from a checkout with ``PYTHONPATH=<checkout>`` finds ``simshard`` here but, with
    an editable install of another checkout in the venv, would take ``simshard.runtime`` from
    that other checkout. Loading it from here first keeps every test on this checkout's code; when
    the installed mapping already points here, nothing changes.
    """
    import simshard

    init = ROOT / "runtime" / "__init__.py"
    if Path(simshard.__file__).resolve().parent != (ROOT / "simshard").resolve() or "simshard.runtime" in sys.modules:
        return
    found = importlib.util.find_spec("simshard.runtime")
    if found is not None and found.origin and Path(found.origin).resolve() == init.resolve():
        return
    spec = importlib.util.spec_from_file_location(
        "simshard.runtime", init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["simshard.runtime"] = module
    spec.loader.exec_module(module)
    simshard.runtime = module


_runtime_from_this_checkout()

# ss.run defaults to the Ray backend; the suite runs the local one unless a test asks for Ray
# (tests/runtime/test_ray.py checks the default itself).
os.environ.setdefault("SIMSHARD_BACKEND", "local")

# Test modules in subfolders import helpers that live here (casedata); make this folder importable.
sys.path.insert(0, str(Path(__file__).parent))
