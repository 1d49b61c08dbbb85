"""benchmarks/hop_path.py runs: two hosts in one process pass a message back and forth over their
real sockets, the floor beside it, and the stamped segments of the path."""

import pytest

from benchmark_loader import load_benchmark


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_hop_path_times_both_hops_and_the_segments(loop, capsys):
    if loop == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is an optional extra")
    hop_path = load_benchmark("hop_path")
    polling = ["--poll"] if loop == "uvloop" else []  # (both hosts polling in one loop: uvloop's turns only)
    hop_path.main(["--hops", "40", "--seconds", "0.2", "--loop", loop, "--segments", *polling])
    out = capsys.readouterr().out
    bare, simshard = (float(line.split(": ")[1].split(" us")[0]) for line in out.splitlines()[1:3])
    assert 0 < bare < simshard  # nothing of simshard's is cheaper than the bare hop
    segments = out.split("where a simshard hop's time goes")[1].splitlines()[1:]
    assert any("read -> mailbox put" in line for line in segments)  # the receiver's path, between its joints
    assert all(float(line.split("us")[0].split()[-1]) < 1000 for line in segments)  # no gap between runs
    if loop == "uvloop":
        assert "both hosts polling" in out
