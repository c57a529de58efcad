"""SVG snapshots of the app at fixed sizes (pytest-textual-snapshot; update with --snapshot-update
after looking at the report). They run on the bundled demo; the cursor blink is frozen."""

from __future__ import annotations

import pytest
from test_tui_support import demo_available, demo_inputs, make_app, settle, until

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
    """The app as it opens (the docs' screenshot): trained and fed wirings side by side."""
    app = make_app(demo_inputs(), first_look=True)
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_then())


@pytest.mark.parametrize("size", [(160, 48), (80, 24)], ids=["160x48", "80x24"])
def test_first_screen(snap_compare, size):
    """The first screen: the trained wiring (the doctor's search) beside the one an engine
    feeds, accuracy and τ of each, the gap row, what to press next; the strip's legend; help and
    quit in the footer."""
    app = make_app(demo_inputs(), first_look=True)
    assert snap_compare(app, terminal_size=size, run_before=run_then())


def test_doctor_120x40(snap_compare):
    """The doctor screen: the verdict line, one line a finding, the last one highlighted (the
    list's end shown), its evidence unfolded."""

    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("d")
        app = pilot.app
        await until(pilot, lambda: getattr(app.screen, "report", None) is not None, timeout=120)
        for _ in range(len(app.screen.findings) + 2):
            await pilot.press("down")
        await pilot.press("e")
        await pilot.pause(0.2)
        app.clear_notifications()
        await pilot.pause()

    app = make_app(demo_inputs(), first_look=True)
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


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
