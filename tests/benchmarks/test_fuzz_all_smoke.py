"""benchmarks/fuzz_all.py cannot rot: every form it fuzzes reads its valid samples, a few hundred
fuzzed inputs give no foreign exception, and its table comes out. Not a speed test (the figures
are the benchmark's, docs/fuzzing figures in docs/performance.md)."""

import random

from benchmark_loader import load_benchmark

fuzz_all = load_benchmark("fuzz_all", register=True)


def test_every_form_reads_its_valid_samples_and_fuzzed_inputs_raise_only_its_own_errors(tmp_path):
    forms = fuzz_all.forms(str(tmp_path))
    assert {"spec", "placements", "shardy", "fhe", "size", "bandwidth", "latency", "mesh", "shape", "bandwidth flags",
            "latency flags",
            "topology file", "comm report", "memory report"} <= set(forms)
    for name, form in forms.items():
        for text in form.valid:
            form.read(text)  # valid samples are read, not refused
        tally = fuzz_all.fuzz(name, form, 40, random.Random(1))
        assert tally.inputs == 40 and tally.foreign == [], (name, tally.foreign)


def test_the_table_names_every_form(capsys):
    assert fuzz_all.main(["--inputs", "140", "--seed", "3"]) in (0, 1)  # 1 only if an input took 100 ms
    out = capsys.readouterr().out
    assert "| comm report | 10 |" in out and "0 foreign exceptions" in out
