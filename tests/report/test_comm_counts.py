"""``CommCounts``: collectives of one or more runs counted per kind, op and module, with bytes."""

from simshard.report.comm import CommRecord
from simshard.report.comm_counts import CommCounts, CommEvent, op_of


def rec(device, instr, kind, source, received, axes=("y",)):
    return CommRecord(device, instr, instr, source, kind, axes, (0, 1), received, received, 1, 1, received)


def test_op_of_reads_the_consumer():
    assert op_of("reshard %4 for %5 dot_general") == "dot_general"
    assert op_of("reshard x for output 0") == "output"
    assert op_of("redistribute [S(0)] -> [R]") == "redistribute"
    assert op_of("shard_map %3: psum") == "psum"
    assert op_of("%7, %8 scan") == "scan"


def test_one_collective_per_instruction_per_run_bytes_over_devices():
    run1 = CommEvent("ss.run f", (rec(0, 3, "all_gather", "reshard %1 for %2 add", 8),
                                  rec(1, 3, "all_gather", "reshard %1 for %2 add", 8),
                                  rec(0, 5, "all_reduce", "reshard %4 for output 0", 6),
                                  rec(1, 5, "all_reduce", "reshard %4 for output 0", 6)))
    run2 = CommEvent("redistribute", (rec(0, 3, "all_gather", "redistribute [S(0)] -> [R]", 4),
                                      rec(1, 3, "all_gather", "redistribute [S(0)] -> [R]", 4)))
    c = CommCounts((run1, run2))
    assert c.get_total_counts() == 3  # instruction 3 of each run counts once per run
    assert c.get_comm_counts() == {"all_gather": 2, "all_reduce": 1}
    assert c.get_comm_counts(torch_names=True) == {"all_gather_into_tensor": 2, "all_reduce": 1}
    assert c.get_comm_op_counts() == {"add": {"all_gather": 1}, "output": {"all_reduce": 1},
                                      "redistribute": {"all_gather": 1}}
    assert c.get_comm_module_counts()["reshard %1 for %2 add"] == {"all_gather": 1}
    assert c.get_comm_bytes() == {"all_gather": 24, "all_reduce": 12}
    assert c.get_comm_bytes("op") == {"add": 16, "output": 12, "redistribute": 8}
    assert [r["collectives"] for r in c.rows()] == [1, 1, 1]
    assert c.render().splitlines()[0] == "total collectives: 3"
    assert CommCounts().get_total_counts() == 0 and CommCounts().get_comm_counts() == {}
