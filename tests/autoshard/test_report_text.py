"""The search's report in words: a runner-up whose solve stopped at its time limit is said to be
unproven, its extra cost an upper bound, never shown as if it were the runner-up's exact price."""

from simshard.autoshard.report import Breakdown, OpExplanation, SearchReport


def report(proven: bool) -> str:
    op = OpExplanation("eqn 3", "dot_general", "f32[8,4] x f32[4,4]", "a[8]=x", "b[4]=x", 2.5e-3,
                       "memory", proven)
    return SearchReport(1.0, Breakdown(1e-3, ((("x",), 5e-4),), 1024), 0.5, 10, 5, True, 4096, (op,), estimated_peak=2048).text()


def test_an_unproven_runner_up_says_so_and_a_proven_one_does_not():
    assert "runner-up b[4]=x (+2.5 ms); decided by memory" in report(True)
    unproven = report(False)
    assert "runner-up b[4]=x (+2.5 ms at most: its solve stopped at the time limit, unproven)" in unproven


def test_runner_ups_under_a_budget_take_no_longer_than_a_budgeted_solve():
    from simshard.autoshard.api import BUDGET_LIMIT, EXPLAIN_SLACK, explain_limit

    assert explain_limit(40.0, None, None) == 40.0 + EXPLAIN_SLACK  # no budget: the search's time and slack
    assert explain_limit(40.0, 1 << 20, None) == BUDGET_LIMIT  # a budget, no time_limit: bounded
    assert explain_limit(1.0, 1 << 20, None) == 1.0 + EXPLAIN_SLACK
    assert explain_limit(40.0, 1 << 20, 60.0) == 40.0 + EXPLAIN_SLACK  # the user's time_limit: as asked
    # four runner-ups share the search's time and the slack, each the slack at least
    assert explain_limit(40.0, None, None, 4) == (40.0 + EXPLAIN_SLACK) / 4
    assert explain_limit(1.0, None, None, 4) == EXPLAIN_SLACK
    assert explain_limit(400.0, 1 << 20, None, 4) == BUDGET_LIMIT
