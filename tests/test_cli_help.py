"""Help that answers: every command's --help ends with a worked example; an argument error is one
line and the line saying what the command needs."""

from __future__ import annotations

import pytest

from inspector.cli import main
from inspector.commands.help_text import EXAMPLES, TRIAGE

COMMANDS = ["eval", "accept", "compare", "doctor", "open", "capture", "reconcile", "sweep", "demo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_ends_with_a_worked_example(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    tail = out[out.rindex("Example") :]
    assert tail.strip() == EXAMPLES[command].strip()
    assert "eagle-inspect " in tail  # a command to copy, not words about one


def test_every_command_has_its_example_and_its_triage_line():
    assert set(EXAMPLES) == set(COMMANDS) == set(TRIAGE)


def test_a_bad_argument_is_one_line_and_what_the_command_needs(capsys):
    with pytest.raises(SystemExit) as e:
        main(["reconcile", "assets/demo/draft"])
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "eagle-inspect reconcile: error: the following arguments are required: --engine-log",
        f"  {TRIAGE['reconcile']} (--help: flags and an example)",
    ]


def test_a_bad_input_is_one_line_and_what_the_command_needs(capsys, tmp_path):
    assert main(["eval", str(tmp_path / "nothing-here")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("eagle-inspect: error: ")
    assert lines[1] == f"  {TRIAGE['eval']} (eagle-inspect eval --help: flags and an example)"


def test_the_apps_help_names_the_docs_page_of_what_is_under_the_cursor():
    from inspector.tui.screens.help import DOCS, docs_line

    line = docs_line(["slots", "lower", "center"])
    assert line.startswith("**Docs for the slot panel** (under the cursor): docs/guides/")
    assert docs_line(["nothing"]).startswith("Every key: docs/reference/keys.md")
    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    for what, page in DOCS.values():
        assert (root / page).is_file(), (what, page)
