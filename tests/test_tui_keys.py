"""Pilot tests: every key of the main screen and its dialogs, on a tiny synthetic draft."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from test_tui_support import make_app, screen_text, settle, synthetic_inputs, until, widget_text

SIZE = (120, 40)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return synthetic_inputs(tmp_path_factory.mktemp("tui-keys"), n_samples=3, seq_len=64)


# One app for the whole module (starting one costs more than most key tests); every test starts
# from the same state through reset().
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_app(inputs):
    app = make_app(inputs, fill=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert app.main.state.session is not None, app.main.messages
        yield app, pilot


async def reset(app, pilot) -> None:
    """Back to the opening state: main screen, sample 0, train wiring, nothing pinned."""
    main = app.main
    while len(app.screen_stack) > 1:
        app.pop_screen()
        await pilot.pause()
    main.state.pins.clear()
    main.mask_only = False
    main.rounds = True
    main.tree = False
    main.colour = "hit"
    main.metrics = "ours"
    main.query_one("TokenStrip").set_mode("hit")
    lst = main.query_one("SampleList")
    lst.sort_mode = 0
    lst.apply_sort()
    main.state.rows.clear()
    main.set_wiring(main.state.session.presets["train"])
    main.set_serving(main.state.session.serving_default())
    main.set_sample(0)
    main.state.gen += 1
    main.state.view = None
    main.request_view()
    main.messages.clear()
    main.set_focus(None)
    await settle(pilot)


@pytest_asyncio.fixture(loop_scope="module")  # the app's loop: timers it starts must run there
async def opened(shared_app):
    app, pilot = shared_app
    await reset(app, pilot)
    return app, pilot


@pytest_asyncio.fixture(loop_scope="module")
async def opened_fill(opened):
    return opened


def row(app) -> int:
    return app.main.state.rows[app.main.state.sample]


@pytest.mark.parametrize("key", ["right", "l"])
async def test_next_position(opened, key):
    app, pilot = opened
    r0 = row(app)
    await pilot.press(key)
    assert row(app) == r0 + 1
    assert app.main.query_one("TokenStrip").cursor == r0 + 3
    assert f"pos {r0 + 1}" in widget_text(app, "#detail")


@pytest.mark.parametrize("key", ["left", "h"])
async def test_previous_position(opened, key):
    app, pilot = opened
    r0 = row(app)
    await pilot.press(key)
    assert row(app) == r0 - 1
    assert f"pos {r0 - 1} " in widget_text(app, "#detail")


async def test_home_end(opened):
    app, pilot = opened
    await pilot.press("end")
    assert row(app) == app.main.state.view.n_rows - 1
    await pilot.press("home")
    assert row(app) == 0


@pytest.mark.parametrize("key,delta", [("right_square_bracket", 1), ("left_square_bracket", -1)])
async def test_sample_keys(opened, key, delta):
    app, pilot = opened
    if delta < 0:
        await pilot.press("right_square_bracket")
        await settle(pilot, fill=False)
    s0 = app.main.state.sample
    await pilot.press(key)
    await settle(pilot, fill=False)
    assert app.main.state.sample == s0 + delta
    assert app.main.state.view.sample == s0 + delta
    assert f"sample #{s0 + delta} of 3" in screen_text(app)


@pytest.mark.parametrize("key", ["n", "f8"])
async def test_next_miss(opened, key):
    app, pilot = opened
    v = app.main.state.view
    r0 = row(app)
    await pilot.press(key)
    r1 = row(app)
    assert r1 in set(v.miss_rows.tolist())
    later = v.miss_rows[v.miss_rows > r0]
    assert r1 == (int(later[0]) if len(later) else int(v.miss_rows[0]))


@pytest.mark.parametrize("key", ["N", "shift+f8"])
async def test_previous_miss(opened, key):
    app, pilot = opened
    v = app.main.state.view
    await pilot.press("end")
    r0 = row(app)
    await pilot.press(key)
    r1 = row(app)
    earlier = v.miss_rows[v.miss_rows < r0]
    assert r1 == int(earlier[-1])


async def test_flip_keys_step_through_flipped_positions(opened):
    app, pilot = opened
    main = app.main
    await pilot.press("f")  # nothing pinned yet: tells the user how
    assert any("pin a reference" in m for m in main.messages)
    await pilot.press("s", "p", "t")  # pin serve, back to train
    await settle(pilot, fill=False)
    assert main.state.ref == main.state.session.presets["serve"]
    # Find a sample with flips (random drafts flip few positions).
    for _ in range(3):
        if len(main.state.view.flipped_rows):
            break
        await pilot.press("right_square_bracket")
        await settle(pilot, fill=False)
    flips = main.state.view.flipped_rows
    assert len(flips), "no flipped position in any synthetic sample"
    await pilot.press("home", "f")
    assert row(app) == int(flips[0]) or (
        int(flips[0]) == 0 and row(app) == int(flips[min(1, len(flips) - 1)])
    )
    text = widget_text(app, "#accuracy")
    assert f"flipped vs ◆ {len(flips)}" in text
    assert str(int(flips[0])) in text
    await pilot.press("F")
    assert row(app) in set(flips.tolist())


async def test_goto(opened):
    app, pilot = opened
    await pilot.press("g")
    assert type(app.screen).__name__ == "GotoScreen"
    await pilot.press("1", "7", "enter")
    assert type(app.screen).__name__ == "MainScreen"
    assert row(app) == 17
    await pilot.press("g", "9", "9", "9", "enter")
    assert row(app) == 17
    assert any("outside" in m for m in app.main.messages)
    await pilot.press("g", "escape")
    assert type(app.screen).__name__ == "MainScreen"


async def test_serving_settings_dialog_and_step_keys(opened):
    from inspector.serving.spec import DraftSpec

    app, pilot = opened
    st = app.main.state
    assert st.spec == DraftSpec(3)  # one TTT step: a chain of 3
    await pilot.press("a")
    assert type(app.screen).__name__ == "ServingScreen"
    await pilot.press("tab", "2", "enter")  # topk 2 without draft tokens: says why, stays open
    assert type(app.screen).__name__ == "ServingScreen"
    error = str(app.screen.query_one("#serving-error").render())
    # the field by the setting's name, not the command line's flag
    assert error.startswith("draft-tokens: ") and "required" in error
    await pilot.press("tab", "1", "2", "enter")  # 3 steps of topk 2 propose 10 nodes at most
    assert type(app.screen).__name__ == "ServingScreen"
    assert "2..11" in str(app.screen.query_one("#serving-error").render())
    await pilot.press("escape")  # cancelled: unchanged
    assert type(app.screen).__name__ == "MainScreen" and st.spec == DraftSpec(3)
    await pilot.press("a", "tab", "2", "tab", "6", "enter")
    await settle(pilot, fill=False)
    assert st.spec == DraftSpec(3, 2, 6)
    assert st.sample_accept(st.wiring) is not None  # replayed on the device thread
    assert any("--speculative-eagle-topk 2" in m for m in app.main.messages)
    await pilot.press("minus", "minus")
    assert st.spec == DraftSpec(1, 2, 3)  # one step of topk 2 proposes 2 nodes: 3 tokens
    await pilot.press("minus")
    assert st.spec == DraftSpec(1, 2, 3) and "at least one step" in app.main.messages[-1]
    await pilot.press("plus")
    await settle(pilot, fill=False)
    assert st.spec == DraftSpec(2, 2, 3) and st.sample_accept(st.wiring) is not None
    assert "tree of 2 steps, topk 2, 3 tokens" in app.main.query_one("#accuracy").border_title


async def test_wiring_editor(opened):
    app, pilot = opened
    main = app.main
    w0 = main.state.wiring
    await pilot.press("w")
    assert type(app.screen).__name__ == "WiringEditor"
    await pilot.press("down", "down", "right", "enter")  # block 2: next slot
    await settle(pilot, fill=False)
    assert main.state.wiring == (w0[0], w0[1], (w0[2] + 1) % 4)
    assert main.state.view.wiring == main.state.wiring
    await pilot.press("w", "s", "enter")  # the serve preset from inside the editor
    await settle(pilot, fill=False)
    assert main.state.wiring == main.state.session.presets["serve"]
    await pilot.press("w", "0", "escape")  # cancelled: unchanged
    assert main.state.wiring == main.state.session.presets["serve"]


async def test_train_and_serve_presets(opened):
    app, pilot = opened
    main = app.main
    await pilot.press("s")
    await settle(pilot, fill=False)
    serve = main.state.session.presets["serve"]
    assert main.state.wiring == serve and main.state.view.wiring == serve
    assert "fc ← [L2, L4, L6] serve" in screen_text(app)
    await pilot.press("t")
    await settle(pilot, fill=False)
    assert main.state.wiring == main.state.session.presets["train"]
    assert "fc ← [embed, L2, L4] train" in screen_text(app)


async def test_pin_and_unpin(opened):
    app, pilot = opened
    main = app.main
    await pilot.press("p")
    await settle(pilot, fill=False)
    assert main.state.pins == [main.state.wiring]
    assert "ref ◆" in screen_text(app)
    await pilot.press("p")
    await settle(pilot, fill=False)
    assert main.state.pins == []


async def test_mask_toggle(opened):
    app, pilot = opened
    main = app.main
    masked = set(main.state.view.masked_rows.tolist())
    await pilot.press("home")
    assert row(app) not in masked  # the synthetic prompt is unmasked
    await pilot.press("m")
    assert main.mask_only and row(app) in masked
    for _ in range(3):
        await pilot.press("right")
        assert row(app) in masked
    await pilot.press("home")
    assert row(app) == min(masked)
    strip = main.query_one("TokenStrip")
    assert "⋯" in screen_text(app) and strip._show.count(True) == len(masked)
    await pilot.press("m")
    assert not main.mask_only


async def test_colour_toggle(opened):
    app, pilot = opened
    await pilot.press("c")
    assert app.main.colour == "p" and app.main.query_one("TokenStrip").mode == "p"
    assert "colour p(true)" in screen_text(app)
    await pilot.press("c")
    assert app.main.colour == "hit"


async def test_sort_cycle(opened_fill):
    app, pilot = opened_fill
    lst = app.main.query_one("SampleList")
    seen = []
    for _ in range(5):
        await pilot.press("o")
        seen.append(lst.sort_mode)
    assert seen == [1, 2, 3, 4, 0]
    await pilot.press("o", "o")  # by cur accuracy, lowest first
    order = [int(lst.cells_at(r)[1]) for r in range(lst.row_count)]
    accs = [app.main.state.stats[(i, app.main.state.wiring)][0].all_tok.acc for i in order]
    assert accs == sorted(accs)


async def test_export(opened, tmp_path, monkeypatch):
    app, pilot = opened
    monkeypatch.chdir(tmp_path)
    await pilot.press("s")
    await settle(pilot, fill=False)
    await pilot.press("e")
    await until(pilot, lambda: any(m.startswith("exported to") for m in app.main.messages))
    # into ./eagle-inspect-exports/, made on demand and named in the notification
    assert not list(tmp_path.glob("eagle-inspect-sample*.json"))
    out = tmp_path / "eagle-inspect-exports"
    files = list(out.glob("eagle-inspect-sample*.json"))
    assert len(files) == 1 and not list(out.glob(".*.tmp"))
    said = [m for m in app.main.messages if m.startswith("exported to")]
    assert said[-1] == f"exported to eagle-inspect-exports/{files[0].name}"
    doc = json.loads(files[0].read_text())
    slots = {tuple(w["wiring"]) for w in doc["wirings"]}
    assert {
        app.main.state.session.presets["train"],
        app.main.state.session.presets["serve"],
    } <= slots
    n_rows = app.main.state.view.n_rows
    assert all(len(w["positions"]) == n_rows for w in doc["wirings"])
    assert doc["wirings"][0]["positions"][0]["true_text"] is not None


async def test_export_refuses_input_folder(opened, inputs, monkeypatch):
    app, pilot = opened
    monkeypatch.chdir(inputs.samples[0])
    await pilot.press("e")
    await until(pilot, lambda: any("export failed" in m for m in app.main.messages))
    assert not list(Path(inputs.samples[0]).glob("eagle-inspect*.json"))


async def test_doctor_screen_applies_wiring(opened, monkeypatch):
    import inspector.doctor as doctor_pkg
    from inspector.doctor import DoctorReport, Finding

    app, pilot = opened
    main = app.main
    serve = main.state.session.presets["serve"]
    report = DoctorReport(
        best_wiring=serve,
        wirings=[],
        findings=[
            Finding("fc_fingerprint", "info", "blocks look fine"),
            Finding("wiring", "error", "serving feeds the wrong slots", "use serve", wiring=serve),
        ],
        serving_config={},
    )
    calls = []

    def fake_diagnose(ev, n_samples=4, **kw):
        calls.append(n_samples)
        kw["progress"]("wiring search", 1, 1)  # the screen's progress callback is passed
        return report

    monkeypatch.setattr(doctor_pkg, "run_loaded", fake_diagnose)
    await pilot.press("d")
    await until(pilot, lambda: type(app.screen).__name__ == "DoctorScreen" and app.screen.report)
    assert calls == [4]
    assert app.screen.report is report
    text = screen_text(app)
    assert "serving feeds the wrong slots" in text and "blocks look fine" in text
    await pilot.press("down", "enter")
    await settle(pilot, fill=False)
    assert type(app.screen).__name__ == "MainScreen"
    assert main.state.wiring == serve


async def test_doctor_screen_shows_failure(opened, monkeypatch):
    import inspector.doctor as doctor_pkg
    from inspector.errors import InputError

    app, pilot = opened

    def failing(ev, n_samples=4, **kw):
        raise InputError("data_9.pt", "input_ids", "bad sample")

    monkeypatch.setattr(doctor_pkg, "run_loaded", failing)
    await pilot.press("d")
    await until(pilot, lambda: "doctor failed" in screen_text(app))
    assert "data_9.pt" in screen_text(app)
    await pilot.press("escape")
    assert type(app.screen).__name__ == "MainScreen"


async def test_doctor_screen_close_cancels_the_run(opened, monkeypatch):
    import threading
    import time

    import inspector.doctor as doctor_pkg

    app, pilot = opened
    stopped = threading.Event()

    def slow(ev, n_samples=4, **kw):
        try:
            for i in range(4000):
                kw["progress"]("wiring search", i, 4000)
                time.sleep(0.005)
        finally:
            stopped.set()

    monkeypatch.setattr(doctor_pkg, "run_loaded", slow)
    await pilot.press("d")
    await until(pilot, lambda: "wiring search" in screen_text(app))
    await pilot.press("escape")
    await until(pilot, stopped.is_set, timeout=5.0)  # far less than the 20 s the run would take
    await settle(pilot, fill=False)
    assert type(app.screen).__name__ == "MainScreen"
    assert not [m for m in app.main.messages if "doctor" in m], app.main.messages


async def test_doctor_screen_without_doctor(opened, monkeypatch):
    import sys

    app, pilot = opened
    monkeypatch.setitem(sys.modules, "inspector.doctor", None)  # import fails
    await pilot.press("d")
    await until(pilot, lambda: "not available" in screen_text(app))
    await pilot.press("escape")
    assert type(app.screen).__name__ == "MainScreen"


@pytest.mark.parametrize("key", ["f1", "question_mark"])
async def test_help(opened, key):
    app, pilot = opened
    await pilot.press(key)
    assert type(app.screen).__name__ == "HelpScreen"
    await until(pilot, lambda: "Next miss" in screen_text(app))
    await pilot.press("escape")
    assert type(app.screen).__name__ == "MainScreen"


async def test_quit(inputs):
    app = make_app(inputs, fill=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0 and not app.is_running


async def test_command_palette_runs_actions(opened):
    app, pilot = opened
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*"serve preset")
    await pilot.pause(0.3)
    await pilot.press("enter")
    await settle(pilot, fill=False)
    assert app.main.state.wiring == app.main.state.session.presets["serve"]


async def test_every_key_in_help_and_palette():
    """Help and palette read the bindings themselves: every binding's title and keys are listed."""
    from inspector.tui.keys import MAIN_KEYS, actions, describe
    from inspector.tui.screens.help import keys_markdown
    from inspector.tui.screens.main import MainScreen

    assert MainScreen.BINDINGS is MAIN_KEYS
    md = keys_markdown()
    for b in MAIN_KEYS:
        title, text = describe(b)
        assert title and text and f"**{title}**: {text}." in md, b
    assert len({a.title for a in actions()}) == len(actions())  # no two actions share a title
    for key in [
        "←",
        "→",
        "`h`",
        "`l`",
        "[",
        "]",
        "`n`",
        "F8",
        "`N`",
        "Shift+F8",
        "`f`",
        "`F`",
        "`g`",
        "`w`",
        "`t`",
        "`s`",
        "`p`",
        "`v`",
        "`m`",
        "`c`",
        "`o`",
        "`e`",
        "`r`",
        "`T`",
        "`d`",
        "`a`",
        "`+`",
        "`-`",
        "F1",
        "?",
        "`q`",
        "Home",
        "End",
    ]:
        assert key in md, key


async def test_palette_lists_every_action(opened):
    from inspector.tui.keys import actions

    app, _ = opened
    commands = {c.title: c.help for c in app.get_system_commands(app.main)}
    for a in actions():
        assert commands.get(a.title) == a.text, a.title


async def test_palette_refuses_what_needs_a_sample(opened):
    app, pilot = opened
    main = app.main
    main.state.view = None  # as while the first sample computes
    assert not main.ready_for("step") and not main.ready_for("export")
    assert main.ready_for("help") and main.ready_for("preset") and main.ready_for("cycle_metrics")


async def test_click_on_token_moves_cursor(opened):
    app, pilot = opened
    strip = app.main.query_one("TokenStrip")
    assert strip.lines_per_row == 2  # each token line has its rounds line under it
    t = strip.token_at(0, 2)  # first token of the second token line
    assert t is not None and strip.token_at(0, 3) == t  # its rounds line counts as it
    await pilot.click("TokenStrip", offset=(2, 3))  # border + padding
    assert row(app) == t - 2


async def test_rounds_line_under_the_tokens(opened):
    """Under each token: a of a round whose first drafted token it is; each round's first token
    bold (ROUND_START); `r` hides the line and shows it again."""
    from inspector.tui.view import ROUND_START
    from inspector.tui.widgets.strip import TokenStrip

    app, pilot = opened
    st = app.main.state
    strip = app.main.query_one(TokenStrip)
    acc = st.current_accept()
    assert acc is not None and strip._a == acc.a_at.tolist()
    first = int(acc.starts[0]) + 1  # the first round's first drafted token
    assert strip._round[first] == ROUND_START
    row_of = strip._row_of[first]
    line = strip._render_rounds(row_of, 200).text
    x = sum(len(strip._texts[t]) for t in strip._rows[row_of][: strip._rows[row_of].index(first)])
    assert line[x] == str(int(acc.accepted[0]))
    height = strip.virtual_size.height
    await pilot.press("r")
    assert not app.main.rounds and strip.lines_per_row == 1
    assert strip.virtual_size.height == height // 2
    await pilot.press("r")
    assert strip.lines_per_row == 2 and strip.virtual_size.height == height


async def test_tree_panel_toggles_with_the_slots_and_follows_the_cursor(opened):
    app, pilot = opened
    main = app.main
    st = main.state
    await pilot.press("T")
    await settle(pilot, fill=False)
    assert main.tree and main.query_one("#tree").display and not main.query_one("#slots").display
    trees = st.trees.get(st.trees_key())
    assert trees is not None and len(trees.accepted) == st.view.n_rows
    assert f"pos {st.row}  token {st.row + 2}  accepts" in widget_text(app, "#tree")
    await pilot.press("right")
    assert f"pos {st.row}  token {st.row + 2}  accepts" in widget_text(app, "#tree")
    await pilot.press("T")
    assert not main.query_one("#tree").display and main.query_one("#slots").display


async def test_sample_list_enter_opens_sample(opened):
    app, pilot = opened
    lst = app.main.query_one("SampleList")
    lst.focus()
    await pilot.press("down", "down", "enter")
    await settle(pilot, fill=False)
    assert app.main.state.sample == 2


async def test_rows_are_predictions_of_token_j_plus_2(inputs):
    """The strip marks token t with row t-2's prediction (position numbering of eval --positions)."""
    from inspector.tui.view import ViewState, strip_marks
    from inspector.tui.widgets.strip import HIT, NONE, PROMPT

    class S:
        pos = np.arange(4)
        masked = np.array([False, True, True, True])
        hit = np.array([True, True, False, False])
        in_vocab = np.array([True, True, True, False])
        p_true = np.array([0.9, 0.5, 0.05, 0.0])

        def __len__(self):
            return 4

    class P:
        steps = [S()]

    class D:
        length = 6
        index = 0

    kind, pbin, show = strip_marks(ViewState(D(), (0,), P()), mask_only=False)
    assert kind == [NONE, NONE, PROMPT, HIT, 3, 4]
    assert pbin == [0, 0, 9, 5, 0, 0]
    _, _, show = strip_marks(ViewState(D(), (0,), P()), mask_only=True)
    assert show == [False, False, False, True, True, True]


async def test_click_on_list_header_sorts(opened):
    app, pilot = opened
    lst = app.main.query_one("SampleList")
    await pilot.click("SampleList", offset=(15, 1))  # the cur% header (after the border)
    assert lst.sort_mode == 2
    assert "cur" in lst.border_title
