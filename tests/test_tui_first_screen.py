"""The app's first screen answers "why is my acceptance low": the wiring the weights were trained
on (the doctor's search) beside the one an engine feeds, their accuracy and τ and the gap, what to
press next; a legend for the strip, help and quit kept in the footer, notifications away from the
figures, one position count; and the doctor screen as a verdict. Pilot tests assert on fields."""

from __future__ import annotations

import re

import pytest
from test_tui_state import SERVE, TRAIN, accept, loaded, steps
from test_tui_support import (
    demo_inputs,
    eval_json,
    make_app,
    needs_demo,
    screen_text,
    settle,
    until,
)

from inspector.tui.first_look import (
    FED_AS_TRAINED,
    FED_BY_CAPTURE,
    FED_BY_CONFIG,
    FirstLook,
    arranged,
    choose_fed,
)

RAW_FLOAT = re.compile(r"\d\.\d{5,}")  # 0.7162270545959473: a float as JSON writes it


# --- without Textual -----------------------------------------------------------------------------
def test_the_fed_wiring_is_the_configs_then_serve_then_the_trained_one():
    # the config selects another wiring than the trained one: an engine reading it feeds that
    assert choose_fed(TRAIN, SERVE, (2, 3, 1)) == (SERVE, FED_BY_CONFIG)
    # the config is right: the serve preset, what an engine capturing layer outputs feeds
    assert choose_fed(TRAIN, TRAIN, SERVE) == (SERVE, FED_BY_CAPTURE)
    assert choose_fed(TRAIN, None, SERVE) == (SERVE, FED_BY_CAPTURE)
    # nothing feeds another wiring
    assert choose_fed(TRAIN, TRAIN, TRAIN) == (TRAIN, FED_AS_TRAINED)
    assert choose_fed(TRAIN, None, None) == (TRAIN, FED_AS_TRAINED)


def test_the_first_look_arranges_only_an_untouched_screen():
    look = FirstLook(TRAIN, SERVE, FED_BY_CAPTURE, 8, TRAIN)
    # as the app opened (the configured wiring alone): trained current, fed the reference
    assert arranged(look, TRAIN, [], TRAIN) == (TRAIN, [SERVE])
    # the config named another wiring than the trained one: the trained one is shown
    assert arranged(FirstLook(TRAIN, SERVE, FED_BY_CONFIG, 8, SERVE), SERVE, [], SERVE) == (
        TRAIN,
        [SERVE],
    )
    # the user chose already (another wiring, or a pin): left as it is
    assert arranged(look, SERVE, [], TRAIN) is None
    assert arranged(look, TRAIN, [SERVE], TRAIN) is None
    # nothing feeds another wiring and the trained one is shown: nothing changes
    assert arranged(FirstLook(TRAIN, TRAIN, FED_AS_TRAINED, 8, TRAIN), TRAIN, [], TRAIN) is None
    # the views name the two by role once the search answered, the presets otherwise
    st = loaded()
    assert st.session.name_of(TRAIN) == "train"
    st.session.first_look = look
    assert st.session.role(TRAIN) == "trained" and st.session.role(SERVE) == "fed"
    assert st.session.name_of(SERVE) == "fed" and st.session.name_of((0, 2, 3)) is None


def test_the_bar_gives_the_gap_and_what_to_press_next():
    from inspector.tui.accuracy import GAP_MARK, accuracy_text

    st = loaded()
    st.session.first_look = FirstLook(TRAIN, SERVE, FED_BY_CAPTURE, 8, TRAIN)
    st.pins = [SERVE]
    st.add_stats(0, TRAIN, steps(7, 10), 12)
    st.add_stats(0, SERVE, steps(2, 10), 12)
    st.add_accept(accept(0, TRAIN, [(2, 2, 3)], spec=st.spec))
    st.add_accept(accept(0, SERVE, [(2, 0, 1), (3, 0, 1)], spec=st.spec))
    lines = accuracy_text(st, metrics="ours", narrow=False, width=160).plain.splitlines()
    trained = next(line for line in lines if line.startswith("●"))
    fed = next(line for line in lines if line.startswith("◆"))
    gap = next(line for line in lines if GAP_MARK in line)
    assert "[embed, L2, L4] trained" in trained and "[L2, L4, L6] fed" in fed
    # 70% against 20% all-tok, 60% against 10% in-vocab (of 9), τ 3.00 against 1.00
    assert gap.split()[4:] == ["+50.0", "pts", "+55.6", "pts", "+2.00"] * 2  # sample, set
    assert lines[-1].startswith("next: d the doctor's verdict")
    st.session.first_look = None
    text = accuracy_text(st, metrics="ours", narrow=False, width=160, looking="wirings 3/8").plain
    assert text.splitlines()[-1] == (
        "finding the wiring the weights were trained on (the doctor's search: wirings 3/8)"
    )


def test_evidence_reads_as_lines_not_json():
    from inspector.tui.evidence import evidence_lines

    ev = {
        "samples": [0, 1, 2, 3],
        "slots": [
            {"slot": 0, "label": "embed", "median_norm": 0.7162270545959473, "faults": []},
            {"slot": 1, "label": "L2", "median_norm": 16.91776466369629, "vanishing": False},
        ],
        "reading": {"where": "config.json", "ids": [0, 2, 4], "z": float("nan"), "none": None},
    }
    lines = evidence_lines(ev)
    assert lines == [
        "samples: [0, 1, 2, 3]",
        "slots:",
        "  - slot 0, label embed, median_norm 0.7162, faults []",
        "  - slot 1, label L2, median_norm 16.92, vanishing no",
        "reading:",
        "  where: config.json",
        "  ids: [0, 2, 4]",
        "  z: NaN",
        "  none: -",
    ]
    assert not any(RAW_FLOAT.search(line) or "{" in line for line in lines)


# --- the app on the demo -------------------------------------------------------------------------
@needs_demo
@pytest.mark.parametrize("size", [(160, 48), (80, 24)], ids=["160x48", "80x24"])
async def test_the_first_screen_puts_trained_and_fed_side_by_side(size, capsys):
    app = make_app(demo_inputs(), first_look=True)
    async with app.run_test(size=size, notifications=True) as pilot:
        await settle(pilot, timeout=120)
        main = app.main
        st, s = main.state, main.state.session
        look = s.first_look
        assert look is not None and not main.looking
        # the doctor's search finds the trained wiring; the config names it, so the fed one is
        # what an engine capturing decoder-layer outputs feeds (the serve preset)
        assert s.wiring_label(look.trained) == "[embed, L2, L4]"
        assert s.wiring_label(look.fed) == "[L2, L4, L6]" and look.fed_why == FED_BY_CAPTURE
        assert st.wiring == look.trained and st.pins == [look.fed]
        # the set's figures are eval's and accept's on the same wirings
        trained, fed = st.totals[look.trained].steps[0], st.totals[look.fed].steps[0]
        assert st.totals[look.trained].n_samples == st.n_good == 48
        tau_trained = st.set_accept(look.trained).figure.accept_length
        tau_fed = st.set_accept(look.fed).figure.accept_length
        assert tau_trained > tau_fed + 1  # the gap: over a token of τ on the demo

        text = screen_text(app)
        lines = text.splitlines()
        gap = next(line for line in lines if "Δ ● − ◆" in line)
        points = 100 * (trained.all_tok.acc - fed.all_tok.acc)
        assert f"+{points:.1f} pts" in gap and f"+{tau_trained - tau_fed:.2f}" in gap
        assert any(re.search(r"● (\[embed, L2, L4\] )?trained ", line) for line in lines)
        assert any(re.search(r"◆ (\[L2, L4, L6\] )?fed ", line) for line in lines)
        assert any("next: d the doctor's verdict" in line for line in lines)
        # the doctor, help and quit stay in the footer at any width
        assert all(k in lines[-1] for k in ("d doctor", "? help", "q quit"))
        # the strip's legend: its colours and its digits
        legend = str(main.center.strip.border_subtitle)
        assert "hit" in legend and "miss" in legend and "accepts" in legend
        # one position count: the header's is the list's and the cursor's range
        n = st.view.n_rows
        assert f"{n} positions" in main.header_bar.render().plain or size[0] < 100
        assert st.list_row(st.sample).length == n
        counts = {
            w: (st.totals[w].steps[0].all_tok.hits, st.totals[w].steps[0].all_tok.total)
            for w in (look.trained, look.fed)
        }
    if size == (160, 48):  # the CLI's figures (outside the app, which captures stdout), once
        doc = eval_json(capsys, demo_inputs(), "embed,L2,L4", "L2,L4,L6")
        by = {tuple(w["wiring"]): w["steps"][0]["all_tok"] for w in doc["wirings"]}
        assert counts == {w: (by[w]["hits"], by[w]["total"]) for w in counts}


@needs_demo
async def test_notifications_leave_the_figures_uncovered():
    app = make_app(demo_inputs(), first_look=True)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, timeout=120)
        await pilot.press("p")  # "pinned ... as the reference", as the bar changes
        await until(pilot, lambda: bool(app.screen.query("Toast")))
        await pilot.pause(0.2)
        bar = app.main.accuracy_bar.region
        for toast in app.screen.query("Toast"):
            r = toast.region
            assert r.y == 1, r  # the header's second line: its first names sample and file
            assert not r.overlaps(bar)


@needs_demo
async def test_the_doctor_screen_reads_as_a_verdict():
    app = make_app(demo_inputs(), first_look=True)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, timeout=120)
        await pilot.press("d")
        await until(
            pilot,
            lambda: type(app.screen).__name__ == "DoctorScreen" and app.screen.report is not None,
            timeout=120,
        )
        screen = app.screen
        verdict = screen.verdict.plain
        assert verdict.startswith("trained on [embed, L2, L4]")
        assert "fed [L2, L4, L6]" in verdict and "fix: " in verdict
        assert "eagle_aux_hidden_state_layer_ids [0, 2, 4]" in verdict
        findings = screen.query_one("#doctor-findings")
        n = len(screen.findings)
        assert n >= 10
        # the list ends with a line saying so, and the cursor stops at the last finding
        assert findings.get_option_at_index(n).disabled
        for _ in range(n + 5):
            await pilot.press("down")
        await pilot.pause(0.1)
        assert findings.highlighted == n - 1
        top = findings.scroll_offset.y
        assert top <= n - 1 < top + findings.scrollable_content_region.height
        assert screen.detail_text().startswith(f"{n} of {n}")
        # serving_config in full in the detail, the evidence folded behind e, formatted
        i = next(k for k, f in enumerate(screen.findings) if f.kind == "serving_config")
        findings.highlighted = i
        await pilot.pause(0.1)
        detail = screen.detail_text()
        assert screen.findings[i].summary in detail.splitlines()
        assert "e shows the evidence" in detail and "evidence (e hides it)" not in detail
        await pilot.press("e")
        await pilot.pause(0.1)
        detail = screen.detail_text()
        assert "evidence (e hides it)" in detail
        evidence = detail.split("evidence (e hides it)", 1)[1].strip().splitlines()
        assert len(evidence) > 3 and not any(RAW_FLOAT.search(line) for line in evidence)
        # key: value lines, no JSON punctuation of their own (a value may quote a flag's JSON)
        assert not any(line.strip().startswith(("{", "}", '"', "[{")) for line in evidence)
        # the sample on screen is traced through the trained path and each engine's
        trace = next(f for f in screen.findings if f.kind == "trace")
        assert trace.evidence["sample"] == screen.trace == 0  # the first sample is on screen
        assert "every stage within rounding" in trace.summary or "parts at" in trace.summary


@needs_demo
async def test_a_config_naming_the_serving_ids_is_what_the_engine_feeds(tmp_path):
    """The demo draft deployed with a config naming ids [2, 4, 6] (engine-logs' deployed
    config): the app opens on the wiring that config selects, the search finds the trained one,
    and the fed wiring is the config's, said so in the header."""
    import shutil

    from test_tui_support import DEMO

    from inspector.session import Inputs

    draft = tmp_path / "deployed"
    draft.mkdir()
    shutil.copy(DEMO / "engine-logs" / "deployed-config.json", draft / "config.json")
    (draft / "model.safetensors").symlink_to(DEMO / "draft" / "model.safetensors")
    base = demo_inputs()
    inputs = Inputs(draft, base.samples, base.target, None, base.tokenizer, True)
    app = make_app(inputs, first_look=True, fill=False)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await settle(pilot, fill=False, timeout=120)
        st = app.main.state
        s, look = st.session, st.session.first_look
        assert s.wiring_label(s.initial) == "[L2, L4, L6]"  # what the config's ids select
        assert s.wiring_label(look.trained) == "[embed, L2, L4]"
        assert look.fed == look.configured == s.initial and look.fed_why == FED_BY_CONFIG
        assert st.wiring == look.trained and st.pins == [look.fed]
        header = screen_text(app).splitlines()[1]
        assert "fc ← [embed, L2, L4] trained" in header and "ref ◆ [L2, L4, L6] fed" in header
        assert "what the config's layer ids select" in header
