"""The docs site's build hook (mkdocs.yml `hooks:`): the home page from the README, the
reference pages written from the code (`inspector.reference_pages`: the commands from the CLI's
parser, the app's keys from its bindings) and the app's screenshots from its SVG snapshots,
added to the build as generated files, so that none can drift from its source."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent


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
    # the app as its snapshot tests see it (tests/__snapshots__: pytest-textual-snapshot's SVGs)
    shots = ROOT / "tests" / "__snapshots__" / "test_tui_snapshots"
    for name, shot in (
        ("app.svg", "test_main_120x40.svg"),
        ("app-trainer-view.svg", "test_trainer_view_120x40.svg"),
        ("app-tree.svg", "test_tree_panel_120x40.svg"),
        ("app-wiring-editor.svg", "test_wiring_editor_120x40.svg"),
    ):
        files.append(File.generated(config, f"img/{name}", content=(shots / shot).read_bytes()))
    return files
