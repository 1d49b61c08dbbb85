"""Exit codes of the command, and the error a user mistake raises.

0 every run verified; 1 a verification failed; 2 bad input (an unknown program, strategy or mesh
axis, a malformed mesh, sharding or shape, a flag that does not apply), reported in one line on
stderr, never with a traceback; 3 a run could not finish (a device failed, Ray could not start
its actors or reach the cluster); 4 anything else went wrong (an exception from the user's
program while it was traced, or a bug in simshard), reported with its traceback so that exit 1
always means a verification failed. 130 the user pressed Ctrl-C (128 + SIGINT, as a shell reports
it): one line, ``interrupted``, after the runs have closed their device actors.
"""

from __future__ import annotations

from simshard.errors import ShardingError
from simshard.ops.factors import RuleError
from simshard.tracing.explicit.errors import ShardingTypeError
from simshard.tracing.tracer import TraceError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_RUN = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT


class UsageError(Exception):
    """A mistake in what the user asked for: the command exits 2 with this message on stderr."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input, whatever stage raises them: a sharding rule broken, a
    function that does not trace, an explicit-mode ambiguity."""
    return UsageError, ShardingError, ShardingTypeError, TraceError, RuleError


def run_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the run itself could not finish (exit 3): a device error (out of
    memory, lost actor, timed-out peer), Ray not starting or not reachable."""
    from simshard.runtime.errors import ExecutionError  # the runtime (~40 ms): once something failed

    return ExecutionError, RuntimeError, ConnectionError, TimeoutError
