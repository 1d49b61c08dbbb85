"""A script of benchmarks/ loaded as a module for its smoke test (benchmarks/ is no package): by
its path, with benchmarks/ on the import path so that its imports of the scripts beside it
(``peers`` imports ``collective_programs``, say) resolve."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str, register: bool = False):
    """``benchmarks/<name>.py``, executed as module ``name``; ``register``: in ``sys.modules`` too
    (where a dataclass of the script looks its module up as it is made). Not by default: Ray's
    pickler sends a class of an unregistered module by value, which a worker that cannot import
    the script needs."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
