"""The importers' tests: JAX with 8 host CPU devices (set before jax is first imported, so
``jax.devices()`` has 8 for meshes of 8), and fixtures that skip, saying why, without the extras."""

import os

import pytest

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(scope="session")
def jax():
    jax = pytest.importorskip("jax", reason="ss.from_jax needs the jax extra: pip install -e '.[jax]'")
    if len(jax.devices()) < 8:
        pytest.skip("jax was imported before tests/importers/conftest.py set 8 host devices (XLA_FLAGS)")
    return jax


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="ss.from_torch needs the torch extra: pip install -e '.[torch]'")
