"""docs/cli.md shows real output: each ```console example ($ simshard ...) is run and compared
(a line ``...`` ends the comparison early; tests/tools/update_cli_docs.py rewrites them), and
every flag of every command is documented."""

import re
import shlex

import pytest

from cli_helpers import ROOT, main_in_process

PAGE = (ROOT / "docs" / "cli.md").read_text()
EXAMPLES = re.findall(r"```console\n\$ simshard (.*?)\n(.*?)```", PAGE, re.S)


def test_the_page_has_examples_of_every_command():
    assert {shlex.split(cmd)[0] for cmd, _ in EXAMPLES} == {"run", "compare", "explain", "show"}


@pytest.mark.parametrize("command, shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_example_output_is_real(command, shown, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "110")
    monkeypatch.chdir(ROOT)
    r = main_in_process(capsys, *shlex.split(command))
    expected = shown.rstrip("\n").splitlines()
    actual = (r.out + r.err).rstrip("\n").splitlines()
    if "..." in expected:
        expected = expected[: expected.index("...")]
        actual = actual[: len(expected)]
    assert [line.rstrip() for line in actual] == [line.rstrip() for line in expected], (
        "docs/cli.md is out of date: PYTHONPATH=. python tests/tools/update_cli_docs.py rewrites its examples")
    expected_code = 2 if r.err else 3 if "OUT OF MEMORY" in r.out else 1 if "--exact" in command else 0
    assert r.code == expected_code


def test_every_flag_is_documented():
    from simshard.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "cmd").choices
    for name, sub in commands.items():
        assert f"simshard {name}" in PAGE or name in ("mlp", "demo")
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in PAGE or f"[{flag}" in PAGE, f"{name} {flag} is not in docs/cli.md"
