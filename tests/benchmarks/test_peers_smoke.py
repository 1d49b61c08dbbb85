"""benchmarks/peers.py cannot rot: its simshard measurements run at toy sizes and return
numbers, a peer that is not installed is reported as such (not an error), and the table is written
into a document between its markers, again and again. Not a speed test."""

import math
import re
import sys

import pytest
from benchmark_loader import load_benchmark

peers = load_benchmark("peers")
import peer_table  # noqa: E402  (beside peers.py: load_benchmark put benchmarks/ on the path)


def positive(v) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v > 0


def test_simshard_measurements_return_times_on_the_local_backend():
    collectives = peers.simshard_collectives(1 << 14, "local", reps=2)
    assert collectives.pop("used") == "local" and all(positive(v) for v in collectives.values())
    mlp = peers.simshard_mlp(16, 32, 64, "local")
    assert positive(mlp["resident"]) and positive(mlp["end_to_end"]) and mlp["used"] == "local"
    assert positive(peers.simshard_message_round("local", rounds=5))
    assert positive(peers.simshard_message_hop("local", hops=6))
    pair = peers.simshard_collectives(1 << 14, "local", reps=2, n=2, kinds=("all_reduce",))  # the pair rows' shape
    assert set(pair) == {"all_reduce", "used"} and positive(pair["all_reduce"])


def test_simshard_on_ray_with_several_devices_per_process(ray_session):
    mlp = peers.simshard_mlp(16, 16, 32, "ray", mesh_shape=(2, 4), per_process=4)
    # each simshard row says what it ran on: its messages per route taken, its routes' ordered
    # device pairs, the run calls' route, the processes' polling, so that a fallback to Ray calls
    # cannot pass unseen (the all-reduce over y stays within each process of 4 devices)
    # (a process per core here: its loop polls, and may have stepped aside for the other test process)
    polled = (r"(polling stepped aside \d+ times \(another task wanted the cores\); )?"
              r"polling \w+( \(stepped aside \d+ times over the mesh's runs\))?")
    assert positive(mlp["resident"]) and re.fullmatch(
        r"messages between devices: process \d+ \(device pairs: process 24, unix 32\); run calls: the "
        rf"driver's control lines \(\d of 2 calls, \d answers by ring\); {polled}; 2 processes on (uvloop|asyncio)",
        mlp["used"]), mlp["used"]
    assert positive(peers.simshard_message_hop("ray", per_process=1, hops=6))
    taken = re.match(r"messages between devices: (.*) \(device pairs: unix 2\); run calls: the driver's "
                     r"control lines \(", peers.USED[(2, 1)])
    # every message on the Unix socket, or its ring of frames where the two ends polled
    assert taken and sum(int(n) for route, n in re.findall(r"(unix|unix ring) (\d+)", taken.group(1))) == 6, \
        peers.USED[(2, 1)]
    assert re.fullmatch(r"(unix|unix ring) \d+(, unix ring \d+)?", taken.group(1)), peers.USED[(2, 1)]


def test_a_peer_that_is_not_installed_is_reported_not_raised(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import no_such_peer_module'\n")
    fake.chmod(0o755)
    assert peers.run_peer(str(fake), "torch", {"what": "collectives", "nbytes": 1024}) == {"error": "not installed"}


def test_each_side_keeps_its_best_round_and_a_peer_that_never_ran_keeps_its_error():
    rounds = [{"resident": 0.05, "end_to_end": 0.2}, {"resident": 0.04, "end_to_end": 0.3}, {"resident": 0.06}]
    assert peers.best_of(rounds) == {"resident": 0.04, "end_to_end": 0.2}
    assert peers.best_of([{"error": "not installed"}] * 2) == {"error": "not installed"}
    assert peers.best_of([{"resident": "failed"}, {"resident": 0.07}]) == {"resident": 0.07}


def test_a_torch_trial_is_timed_from_the_first_rank_start_to_the_last_rank_end():
    # rank 1 left the barrier 3 ms after rank 0 and finished last; per=: several operations a trial
    ranks = [{"x": [(0.0, 0.010), (1.0, 1.020)], "per": {"x": 2}, "y": "unsupported: no"},
             {"x": [(0.003, 0.012), (1.001, 1.009)], "per": {"x": 2}, "y": "unsupported: no"}]
    assert peers.span_times(ranks) == {"x": pytest.approx(0.006), "y": "unsupported: no"}


def test_the_table_has_ratios_and_is_rewritten_between_its_markers(tmp_path):
    result = {"rows": [{"work": "1 MiB all-reduce, 8 ranks", "simshard ray": 0.02, "simshard local": 0.004,
                        "torch gloo": 0.01, "jax": "not installed"}],
              "per_message_round": {"local": 2e-4}, "date": "2026-11-24", "load": 0.5, "quick": True}
    text = peers.table(result)
    assert "| 1 MiB all-reduce, 8 ranks | 20.0 ms | 4.0 ms | 10.0 ms | not installed | 2.00x | - | - |" in text
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nintro\n")
    peers.write_section(doc, text)
    peers.write_section(doc, text.replace("20.0 ms", "30.0 ms"))
    body = doc.read_text()
    assert body.count(peer_table.MARK_BEGIN) == 1 and "30.0 ms" in body and "20.0 ms" not in body
    assert body.startswith("# Performance\n\nintro\n")


def test_rows_left_out_are_not_run_and_the_table_says_nothing_of_them():
    import argparse

    args = argparse.Namespace(quick=True, peer_python=sys.executable, rounds=1, rows=[], sides=list(peers.SIDES))
    result = peers.measure(args)
    assert result["rows"] == [] and result["per_message_round"] == {}
    text = peers.table(result)
    assert "Messages in rounds" not in text and "when it ended" in text


def test_sides_left_out_are_not_run_and_their_rows_say_so():
    """``--sides``: a lease of a many-core machine measures only the goals' sides, in more rounds."""
    import argparse

    args = argparse.Namespace(quick=True, peer_python=sys.executable, rounds=1, rows=["collectives"], sizes=["small"],
                              sides=["local"])
    rows = peers.measure(args)["rows"]
    assert [r["work"] for r in rows] == [f"16 KiB {k.replace('_', '-')}, 8 ranks" for k in peers.KINDS]
    for r in rows:
        assert r["simshard ray"] is None and positive(r["simshard local"]), r
        assert r["torch gloo"] == r["jax"] == "not run (--sides)", r


def test_the_loops_rows_measure_each_side_on_the_loop_they_name(ray_session):
    """``--rows loops``: the pair's rows on Ray's default loop and with uvloop hidden, each row
    naming the loop its processes ran on (uvloop's where it is installed: CI installs it)."""
    import argparse
    import importlib.util

    rows = []
    peers.add_loops(argparse.Namespace(quick=True, rounds=1), lambda work, ray=None, used=None, **_: rows.append((work, ray, used)))
    default = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert len(rows) == 6 and all(positive(ray) for _, ray, _ in rows), rows
    for work, _, used in rows:
        loop = default if work.endswith("Ray's default loop") else "asyncio"
        assert work.endswith(("Ray's default loop", "uvloop hidden")) and used.endswith(f"processes on {loop}"), (work, used)


def test_where_the_defaults_are_a_device_per_process_the_two_ray_rows_are_measured_once(monkeypatch):
    """On a machine with a core for each of 8 processes the defaults are one device per process:
    the two Ray Megatron rows are one configuration, measured once (the lease's minutes go to rounds)."""
    import argparse

    asked = []

    def simshard_mlp(batch, d, d_ff, backend, mesh_shape=(2, 4), per_process=None, **_):
        asked.append((backend, per_process))
        return {"resident": 1e-3, "end_to_end": 2e-3, "used": "stand-in"}

    monkeypatch.setattr(peers, "auto_per_process", lambda n: 1)
    monkeypatch.setattr(peers, "simshard_mlp", simshard_mlp)
    args = argparse.Namespace(quick=True, peer_python=sys.executable, rounds=2, rows=["mlp"], sides=["ray"])
    rows = peers.measure(args)["rows"]
    assert asked == [("ray", 1)] * 4  # 2 shapes (quick: the same toy one twice), 2 rounds, once each
    defaults, one_each = rows[0], rows[1]
    assert "defaults" in defaults["work"] and "1 device per process" in one_each["work"]
    assert defaults["simshard ray"] == one_each["simshard ray"] == 1e-3
