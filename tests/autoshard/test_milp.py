"""The solve of a nearly integral relaxation (``milp.within_gap``): only the binaries the
relaxation leaves fractional are searched, and the result is kept only where it is within the
gap of the relaxation's bound, so it is the optimum to the tolerance of the whole branch and bound."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("scipy")

from simshard.autoshard import milp as milp_module  # noqa: E402
from simshard.autoshard.milp import LinearModel  # noqa: E402


def two_choices(constant: float) -> LinearModel:
    """Two values, each held whole (cost 0, 2 bytes) or split (cost 1000), at most 3 bytes held:
    the relaxation holds one whole and half of the other (500); the optimum splits one (1000).
    ``constant``: a third choice of one candidate, its cost added to every strategy."""
    m = LinearModel()
    for costs in ([0.0, 1000.0], [0.0, 1000.0], [constant]):
        first = m.vars(np.array(costs))
        m.row([(first + k, 1.0) for k in range(len(costs))], 1, 1)
    m.row([(0, 2.0), (2, 2.0)], 0, 3)
    return m


@pytest.mark.parametrize("constant, searched", [(0.0, "whole"), (1e8, "fractional")])
def test_a_nearly_integral_relaxation_gives_the_optimum(monkeypatch, constant, searched):
    """Where the gap to the relaxation is large (500 of 1000) the whole program is searched; where
    a large cost common to every strategy makes it small (500 of 1e8, under 1e-4) only the
    fractional binaries are. Both give the optimum, 1000 more than the constant."""
    calls = []
    real = milp_module.within_gap

    def spy(*args, **kw):
        got = real(*args, **kw)
        calls.append(got)
        return got

    monkeypatch.setattr(milp_module, "within_gap", spy)
    solution = two_choices(constant).solve(gap=1e-4)
    assert solution.objective == pytest.approx(constant + 1000.0, rel=1e-12)
    assert sorted(np.round(solution.values[:4]).tolist()) == [0.0, 0.0, 1.0, 1.0]
    assert len(calls) == 1 and (calls[0] is not None) == (searched == "fractional")


def test_the_branch_and_bound_prints_nothing_in_a_fresh_process():
    """HiGHS's banner (printed by its first constructor, to the C stdout) stays out of what a
    process prints: ``simshard autoshard``'s output is the strategy and its costs only."""
    import subprocess
    import sys

    pytest.importorskip("highspy")
    code = ("import numpy as np\n"
            "from tests.autoshard.test_milp import two_choices\n"
            "m = two_choices(0.0)\n"
            "print(m.solve(start=np.array([1.0, 0, 0, 1, 1])).objective)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert out.stdout.split() == ["1000.0"], out.stdout
