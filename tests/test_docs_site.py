"""The docs site builds with `mkdocs build --strict` (a broken link, an anchor that is not there, a
page left out of the nav fail it), and its reference pages are the code's: every command and
flag of the parser, every key of the app."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs site needs mkdocs (the test extra has it)")
    pytest.importorskip("material", reason="the docs site needs mkdocs-material")
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    pages = ("index.html", "reference/commands/index.html", "reference/keys/index.html")
    for page in (*pages, "img/app.svg"):
        assert (tmp_path / "site" / page).is_file(), page
    home = (tmp_path / "site" / "index.html").read_text()
    assert 'href="reference/commands/"' in home and 'src="img/app.svg"' in home


def _parsers(parser: argparse.ArgumentParser, name: str = "eagle-inspect"):
    yield name, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, p in a.choices.items():
                yield from _parsers(p, f"{name} {sub}")


def test_the_commands_page_holds_every_command_and_flag():
    from inspector.cli import build_parser
    from inspector.reference_pages import commands_markdown

    parser = build_parser()
    page = commands_markdown(parser)
    for name, p in list(_parsers(parser))[1:]:
        assert f"`{name}`" in page, name
        for a in p._actions:
            for flag in a.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in page, (name, flag)


def test_the_keys_page_holds_every_binding_of_the_main_screen():
    from inspector.reference_pages import keys_markdown
    from inspector.tui.keys import MAIN_KEYS

    page = keys_markdown([("Main screen", MAIN_KEYS)])
    for b in MAIN_KEYS:
        title = (b.tooltip or "").partition(": ")[0]
        assert f"**{title}**" in page, b.action
        assert f"`{b.key_display or b.key}`" in page, b.key
