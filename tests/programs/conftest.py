"""One local run per (program, strategy) per test process: the parametrized run-everything test
and the formula tests share it."""

import functools

import pytest

from simshard import programs


@functools.lru_cache(maxsize=None)
def _run(program: str, strategy: str):
    return programs.load(program).run(strategy, backend="local")


@pytest.fixture(scope="session")
def run_strategy():
    """``run_strategy(program, strategy)``: the RunResult of that strategy on the local backend."""
    return _run
