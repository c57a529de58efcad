"""The docs site's build hook (mkdocs.yml `hooks:`): the home page from the README, the
reference pages written from the code (`inspector.reference_pages`: the commands from the CLI's
parser, the app's keys from its bindings), added to the build as generated files, and the app's
screenshots, which the app itself draws into docs/img (`docs/screens.py`, git-ignored) before the
pages are read: none can drift from its source."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent
_shot = {"serve": False, "done": False}


# the README's words for the generated pages, linked on the site (they are not files on GitHub)
GENERATED_REFERENCE = (
    "every command and flag, and the app's keys (written from the code when the site\n  builds)",
    "[every command and flag](reference/commands.md) and [the app's keys](reference/keys.md)\n"
    "  (written from the code when the site builds)",
)


def home_page(readme: str) -> str:
    """The site's home: the README, its links made the site's (one text, never two copies)."""
    old, new = GENERATED_REFERENCE
    if old not in readme:
        raise ValueError(
            "README.md no longer names the generated reference pages as the hook expects"
        )
    text = readme.replace(old, new).replace("](docs/", "](")
    return text.replace("](assets/screenshots/app.svg)", "](img/app.svg)")


def on_startup(command, dirty):
    _shot["serve"] = command == "serve"


def on_pre_build(config):
    """The app's screens, drawn by the app on the demo (docs/screens.py) into docs/img, before
    the files are read; `mkdocs serve` draws them once, not at every rebuild of an edit."""
    if _shot["serve"] and _shot["done"]:
        return
    p = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "screens.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise PluginError(f"docs/screens.py failed:\n{p.stdout}{p.stderr}")
    _shot["done"] = True


def on_files(files, config):
    from inspector.cli import build_parser
    from inspector.reference_pages import commands_markdown, keys_markdown
    from inspector.tui.screens.doctor import DoctorScreen
    from inspector.tui.screens.help import HelpScreen
    from inspector.tui.screens.main import MainScreen
    from inspector.tui.screens.wiring import WiringEditor

    keys = [
        ("Main screen", MainScreen.BINDINGS),
        ("Wiring editor", WiringEditor.BINDINGS),
        ("Doctor screen", DoctorScreen.BINDINGS),
        ("Help screen", HelpScreen.BINDINGS),
    ]
    pages = {
        "index.md": home_page((ROOT / "README.md").read_text(encoding="utf-8")),
        "reference/commands.md": commands_markdown(build_parser()),
        "reference/keys.md": keys_markdown(keys),
    }
    for path, text in pages.items():
        files.append(File.generated(config, path, content=text))
    return files


# a fenced code block as the theme writes it; a console one holds a `$ ` prompt (class "gp")
CODE_BLOCK = re.compile(r'<div class="highlight"><pre>(.*?)</pre></div>', re.S)
BOX = re.compile(r"[│┃━─╭╰┏┗┡└]")


def console_columns(block_html: str) -> int:
    """The width of a console block's widest box-drawn line (a table's or a panel's rules), 0
    when it draws none: what must fit across the page without wrapping."""
    text = html.unescape(re.sub(r"<[^>]+>", "", block_html))
    return max((len(x) for x in text.splitlines() if BOX.search(x)), default=0)


def on_post_page(output, page, config):
    """Each console block marked `console`, with --cols its widest box-drawn line (or 80): the
    site's CSS (docs/stylesheets/console.css) sizes its font so that many columns fit."""

    def mark(m: re.Match) -> str:
        if 'class="gp"' not in m[1]:
            return m[0]
        cols = max(console_columns(m[1]), 80)
        return f'<div class="highlight console" style="--cols: {cols}"><pre>{m[1]}</pre></div>'

    return CODE_BLOCK.sub(mark, output)
