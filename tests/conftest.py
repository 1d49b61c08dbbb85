import os
import sys
from pathlib import Path


# simshard.runtime and simshard.programs are this checkout's runtime/ and programs/ folders even
# when the venv holds an editable install of another checkout (simshard/_checkout.py says how).
from simshard._checkout import use_checkout_packages  # noqa: E402

use_checkout_packages()

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
        from simshard.runtime.ray.start import ensure_ray

        ensure_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def never_step_aside(monkeypatch):
    """Polling in this process that never steps aside (``wire/preemption``; a Ray mesh's processes
    take ``runtime_helpers.NEVER_STEP_ASIDE`` as their ``runtime_env``), whatever the machine's
    load: for the tests of when a loop polls and what goes by ring while it does, not of whether
    its core is wanted (on a 2-core machine running two test processes it often is)."""
    monkeypatch.setenv("SIMSHARD_STEP_ASIDE", "0")
