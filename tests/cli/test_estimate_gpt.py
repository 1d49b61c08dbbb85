"""``simshard estimate gpt --config ... --parallel ...``: the training step from numbers on the
command line (simshard/cli/training.py)."""

from __future__ import annotations

import json

import pytest

from cli_helpers import main_in_process

ONE_T = ["estimate", "gpt", "--config", "layers=128,hidden=25600,heads=160,vocab=51200,seq=2048",
         "--parallel", "tp=8,pp=64,dp=6", "--batch", "3072", "--device", "a100", "--nodes", "384"]


def test_a_trillion_parameters_on_3072_devices_with_every_option_tuned(capsys, tmp_path):
    out = tmp_path / "o.json"
    ran = main_in_process(capsys, *ONE_T, "--json", str(out))
    assert ran.code == 0, ran.err
    doc = json.loads(out.read_text())
    assert doc["devices"] == 3072 and doc["device"] == "a100"
    assert set(doc["chosen"]) == {"microbatch", "schedule", "recompute", "zero", "sequence_parallel"}
    assert doc["fits"] and doc["peak_memory_bytes"] <= 80e9
    assert doc["step_seconds"] > 0 and 100e12 < doc["model_flops_per_device"] < 312e12
    assert doc["mfu_flops_per_device"] < doc["model_flops_per_device"]
    assert doc["topology"]["nodes"]["size"] == 8
    assert "chosen (the fastest that fits)" in ran.out and "TFLOP/s per device" in ran.out


def test_given_options_are_kept_and_reported_as_given(capsys, tmp_path):
    out = tmp_path / "o.json"
    ran = main_in_process(capsys, *ONE_T, "--microbatch", "1", "--schedule", "interleaved:2", "--recompute", "full",
                          "--zero", "1", "--sequence-parallel", "off", "--json", str(out))
    assert ran.code == 0, ran.err
    doc = json.loads(out.read_text())
    assert doc["chosen"] == [] and doc["candidates"] == 1
    assert (doc["microbatch"], doc["schedule"], doc["recompute"], doc["zero"], doc["sequence_parallel"]) == \
        (1, "interleaved:2", "full", 1, False)
    assert "nothing, all given" in ran.out


def test_a_library_configuration_by_name(capsys, tmp_path):
    out = tmp_path / "o.json"
    ran = main_in_process(capsys, "estimate", "gpt", "--config", "7b", "--parallel", "tp=8,pp=1,dp=16",
                          "--device", "h100", "--json", str(out))
    assert ran.code == 0, ran.err
    doc = json.loads(out.read_text())
    assert doc["config"] == {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000, "seq": 2048, "ffn": 16384}
    assert doc["batch"] == 1024 and doc["device"] == "h100"


@pytest.mark.parametrize("args, message", [
    (["--config", "layers=2,hidden=3", "--parallel", "tp=1"], "missing heads, vocab, seq"),
    (["--config", "huge", "--parallel", "tp=1"], "not a library configuration"),
    (["--config", "7b", "--parallel", "tp=3"], "do not split over tp=3"),
    (["--config", "7b", "--parallel", "tp=8,pp=1,dp=16", "--nodes", "3"], "do not spread evenly"),
    (["--config", "7b", "--parallel", "tp=8,x=2"], "is not one of"),
    (["--config", "7b", "--parallel", "tp=8,pp=2,dp=8", "--schedule", "interleaved"], "interleaved:V"),
])
def test_bad_input_names_the_problem(capsys, args, message):
    ran = main_in_process(capsys, "estimate", "gpt", *args)
    assert ran.code == 2 and message in ran.err


def test_a_topology_file_and_a_device_class(capsys, tmp_path):
    """``--topology FILE`` with links for tp, dp and pp; ``--nodes`` sets the devices a node holds."""
    topo = tmp_path / "t.json"
    topo.write_text(json.dumps({"links": {"tp": {"bandwidth": 100e9, "latency": 1e-6}},
                                "default": {"bandwidth": 10e9, "latency": 5e-6}}))
    out = tmp_path / "o.json"
    ran = main_in_process(capsys, "estimate", "gpt", "--config", "gpt2-small", "--parallel", "tp=4,pp=2,dp=2",
                          "--device", "a100-40gb", "--topology", str(topo), "--nodes", "4", "--json", str(out))
    assert ran.code == 0, ran.err
    doc = json.loads(out.read_text())
    assert doc["topology"]["links"]["tp"]["bandwidth"] == 100e9 and doc["topology"]["nodes"]["size"] == 4
    assert doc["device"] == "a100-40gb" and doc["device_memory_bytes"] == 40e9
