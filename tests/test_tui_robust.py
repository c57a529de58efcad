"""The app under hostile conditions: a corrupt first sample, a 40x12 terminal and resizes, 200
keys sent at once, an export that cannot be written, file names with markup and control
characters. Each must leave the app painting and responsive, with one clear message."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from test_tui_support import make_app, screen_text, settle, synthetic_inputs, until, widget_text
from textual import events

KEYS = [
    "right", "left", "h", "l", "home", "end", "left_square_bracket", "right_square_bracket",
    "n", "N", "f8", "shift+f8", "f", "F", "m", "c", "o", "v", "t", "s", "p", "e",
    "w", "down", "up", "escape", "g", "1", "enter", "question_mark", "f1", "escape", "d",
]  # fmt: skip
CHARS = {"left_square_bracket": "[", "right_square_bracket": "]", "question_mark": "?"}


def send_keys(app, keys: list[str]) -> None:
    """Queue key events all at once, as a held key or a paste would (Pilot.press waits for each)."""
    for k in keys:
        char = CHARS.get(k, k if len(k) == 1 else None)
        app.post_message(events.Key(k, char))


async def back_to_main(app, pilot) -> None:
    for _ in range(10):
        if len(app.screen_stack) == 1:
            return
        await pilot.press("escape")
    assert len(app.screen_stack) == 1, app.screen_stack


async def test_a_corrupt_first_sample_is_an_error_row_and_the_rest_shows(tmp_path, monkeypatch):
    inputs = synthetic_inputs(tmp_path, n_samples=3, seq_len=40)
    Path(inputs.samples[0], "data_0.pt").write_bytes(b"\x00 not a torch file")
    app = make_app(inputs)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        st = app.main.state
        assert st.session is not None and st.session.first_sample == 1
        assert st.sample == 1 and st.view is not None and st.view.sample == 1
        assert set(st.errors) == {0}
        row0 = app.main.query_one("SampleList").row_cells(0)
        assert row0[0] == "✗" and row0[3] == "error"
        assert sum("sample #0 skipped" in m and "data_0.pt" in m for m in app.main.messages) == 1
        assert "sample #1 of 3" in screen_text(app)
        assert st.totals[st.wiring].n_samples == 2  # the fill counts the two good ones
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert st.sample == 0 and st.view is None and "sample #0: " in screen_text(app)
        await pilot.press("right_square_bracket", "right_square_bracket")
        await settle(pilot)
        assert st.view is not None and st.view.sample == 2


async def test_tiny_terminal_resize_and_200_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `e` exports here
    inputs = synthetic_inputs(tmp_path / "in", n_samples=4, seq_len=48)
    app = make_app(inputs)
    async with app.run_test(size=(40, 12), notifications=True) as pilot:
        await settle(pilot)
        assert "eagle-inspect" in screen_text(app)
        await pilot.press("right", "v", "m")
        for size in ((120, 40), (40, 12), (80, 24), (41, 13)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert len(screen_text(app).splitlines()) == size[1]
        rng = random.Random(0)
        send_keys(app, [rng.choice(KEYS) for _ in range(200)])
        t0 = time.monotonic()
        await pilot.pause(0.5)
        await back_to_main(app, pilot)
        await settle(pilot, timeout=60)
        assert time.monotonic() - t0 < 60 and app.is_running
        main = app.main
        assert not [m for m in main.messages if m.startswith("internal error")], main.messages
        # Still responsive: a sample shows and the cursor moves.
        main.mask_only = False
        await pilot.press("home")
        r0 = main.state.rows[main.state.sample]
        await pilot.press("right")
        assert main.state.rows[main.state.sample] == r0 + 1
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert f"pos {r0 + 1}" in widget_text(app, "#detail")


def unwritable_dir(tmp_path: Path) -> Path:
    """A folder nothing can be written into. Root ignores permission bits, so as root /proc (a
    pseudo-filesystem where no regular file can be created) stands in for a read-only folder."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.access(ro, os.W_OK):
        return Path("/proc")
    return ro


async def test_export_into_a_read_only_folder_is_one_error(tmp_path, monkeypatch):
    inputs = synthetic_inputs(tmp_path / "in", n_samples=2, seq_len=40)
    out = unwritable_dir(tmp_path)
    monkeypatch.chdir(out)
    app = make_app(inputs, fill=False)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("e")
        await until(pilot, lambda: any("export failed" in m for m in app.main.messages))
        await settle(pilot, fill=False)
        errors = [m for m in app.main.messages if "failed" in m or "error" in m]
        assert len(errors) == 1 and errors[0].startswith("export failed: ")
        assert "\n" not in errors[0] and "Traceback" not in errors[0]
        assert app.is_running and not list(out.glob("eagle-inspect-sample*"))
        await pilot.press("right")  # still working
        assert app.main.state.view is not None


HOSTILE = "run[bold red][link=x]\x1b[31m\tx\n"  # no "/": a file name cannot hold one


@pytest.mark.parametrize("bad", [False, True])
async def test_markup_and_control_characters_in_file_names(tmp_path, monkeypatch, bad):
    monkeypatch.chdir(tmp_path)  # `e` exports here
    inputs = synthetic_inputs(tmp_path, n_samples=2, seq_len=40)
    folder = Path(inputs.samples[0])
    (folder / "data_0.pt").rename(folder / f"0_{HOSTILE}.pt")  # sorts first
    if bad:
        (folder / "data_1.pt").write_bytes(b"garbage")
        (folder / "data_1.pt").rename(folder / f"1_{HOSTILE}.pt")
    app = make_app(inputs)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        main = app.main
        assert main.state.view is not None
        text = screen_text(app)
        assert "\x1b" not in text and "\t" not in text
        assert "0_run[bold red][link=x]\\x1b[31m\\tx\\n.pt" in text  # the header: markup as text
        for m in main.messages:
            assert "\x1b" not in m and "\n" not in m
        if bad:
            assert any("sample #1 skipped" in m and "\\x1b" in m for m in main.messages)
            await pilot.press("right_square_bracket")
            await settle(pilot)
            assert main.state.view is None and "\x1b" not in screen_text(app)
        await pilot.press("e")  # the export names the file from the sample's name
        await pilot.press("question_mark", "escape", "d", "escape")
        await settle(pilot)
        assert app.is_running


@pytest.mark.parametrize("keys", [["g", "enter", "enter"], ["w", "enter", "enter"], ["g", "escape", "escape"], ["question_mark", "escape", "escape"]])  # fmt: skip
async def test_keys_queued_behind_a_closing_dialog_never_pop_the_main_screen(tmp_path, keys):
    app = make_app(synthetic_inputs(tmp_path, n_samples=2, seq_len=40), fill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        main = app.main
        send_keys(app, keys)
        await pilot.pause(0.3)
        # The dialog may or may not have opened before the keys behind it arrived; either way
        # the main screen stays at the bottom and the app keeps running.
        assert app.is_running and app.screen_stack[0] is main
        await back_to_main(app, pilot)
        await pilot.press("right")
        assert app.main.state.view is not None


async def test_doctor_findings_naming_hostile_files_are_escaped(tmp_path, monkeypatch):
    import inspector.doctor as doctor_pkg
    from inspector.doctor import DoctorReport, Finding

    inputs = synthetic_inputs(tmp_path, n_samples=2, seq_len=40)
    report = DoctorReport(
        best_wiring=(0, 1, 2),
        wirings=[],
        findings=[Finding("samples", "warning", f"{HOSTILE}.pt could not be scored", HOSTILE)],
        serving_config={},
    )
    monkeypatch.setattr(doctor_pkg, "run_loaded", lambda ev, n_samples=4, **kw: report)
    app = make_app(inputs, fill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("d")
        await until(pilot, lambda: "could not be scored" in screen_text(app))
        text = screen_text(app)
        assert "\x1b" not in text and "[link=x]\\x1b[31m" in text
        await pilot.press("escape")
