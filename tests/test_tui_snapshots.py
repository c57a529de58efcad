"""SVG snapshots of the app at fixed sizes (pytest-textual-snapshot; update with --snapshot-update
after looking at the report). They run on the bundled demo; the cursor blink is frozen."""

from __future__ import annotations

import pytest
from test_tui_support import demo_available, demo_inputs, make_app, settle

pytestmark = pytest.mark.skipif(not demo_available(), reason="assets/demo not built")


@pytest.fixture(autouse=True)
def frozen(monkeypatch):
    """No blinking cursors, no animations: every frame is the same frame."""
    from textual.widgets import Input

    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")


def run_then(*keys: str, pause_fill: bool = True):
    async def run_before(pilot) -> None:
        await settle(pilot)
        for k in keys:
            await pilot.press(k)
            await settle(pilot, fill=pause_fill)
        pilot.app.clear_notifications()
        await pilot.pause()

    return run_before


def test_main_120x40(snap_compare):
    assert snap_compare(make_app(demo_inputs()), terminal_size=(120, 40), run_before=run_then())


def test_wiring_gap_120x40(snap_compare):
    """Serve pinned as the reference, back on train: both rows, the flips, the Δ column."""
    app = make_app(demo_inputs())
    keys = ("s", "p", "t", "home", "f")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_then(*keys))


def test_main_80x24(snap_compare):
    app = make_app(demo_inputs())
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_then("n"))


def test_colour_by_p_masked_only_100x30(snap_compare):
    app = make_app(demo_inputs())
    assert snap_compare(app, terminal_size=(100, 30), run_before=run_then("c", "m", "n"))


def test_wiring_editor_120x40(snap_compare):
    app = make_app(demo_inputs())
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_then("w", "down", "right"))


def test_trainer_view_120x40(snap_compare):
    """Serve pinned, back on train, `v`: speculators' own full_acc / cond_acc per wiring."""
    app = make_app(demo_inputs())
    keys = ("s", "p", "t", "v")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_then(*keys))


def test_tree_panel_120x40(snap_compare):
    """A tree of 3 steps, topk 4, 8 tokens (`a`), the draft tree panel at the cursor (`T`)."""
    app = make_app(demo_inputs())
    keys = ("a", "tab", "4", "tab", "8", "enter", "T")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_then(*keys))
