"""`open --compare CKPT_B`, key `b`: the shown sample under both drafts, held to the CLI's own
numbers on that sample (`compare --limit 1`: each one's accept length and the round starts where
they part; `eval --positions` of each: every row's hit), then Enter moves the main cursor to the
highlighted row. `B` switches the main screen to the second draft as to another wiring. Without
a second draft, `b` and `B` say how to get one."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_tui_support import (
    demo_available,
    demo_inputs,
    make_app,
    settle,
    synthetic_inputs,
    until,
)

from inspector.cli import main as cli_main

needs_demo = pytest.mark.skipif(not demo_available(), reason="assets/demo not built")


def noised(src, dst, scale: float = 0.5):
    """A copy of a draft with its fc weight noised: a worse checkpoint of the same run."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy(f, dst / f.name)
    w = load_file(str(src / "model.safetensors"))
    fc = w["fc.weight"]
    g = torch.Generator().manual_seed(0)
    w["fc.weight"] = fc + scale * fc.std() * torch.randn(fc.shape, generator=g, dtype=fc.dtype)
    save_file(w, str(dst / "model.safetensors"))
    return dst


def cli_json(capsys, argv) -> dict:
    capsys.readouterr()
    assert cli_main([*argv, "--json", "--device", "cpu"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


def cli_figures(capsys, tmp_path):
    """The demo's draft (A), a worse copy (B), `compare --limit 1` of the two, and each one's
    `eval --positions` on that sample."""
    inputs = demo_inputs()
    b = noised(inputs.checkpoint, tmp_path / "b")
    samples = inputs.samples
    ref = cli_json(capsys, ["compare", str(inputs.checkpoint), str(b), *samples, "--limit", "1"])
    evals = [
        cli_json(capsys, ["eval", str(c), *samples, "--limit", "1", "--positions"])
        for c in (inputs.checkpoint, b)
    ]
    return inputs, b, ref, evals


@needs_demo
async def test_b_compares_the_sample_under_both_drafts_as_the_cli_does(tmp_path, capsys):
    inputs, b, ref, evals = cli_figures(capsys, tmp_path)
    hits = [
        {p["pos"]: p["hit"] for p in e["wirings"][0]["positions"] if p["step"] == 0} for e in evals
    ]
    app = make_app(inputs, compare=(str(b), "train"))
    async with app.run_test(size=(150, 44)) as pilot:
        await settle(pilot, fill=False)
        st = app.main.state
        assert st.sample == 0 and st.session.compare == str(b)
        await pilot.press("b")
        await until(pilot, lambda: type(app.screen).__name__ == "CompareScreen")
        screen = app.screen
        await until(pilot, lambda: screen.comparison is not None, timeout=60)
        c = screen.comparison
        assert c.stats_a.accept_length == pytest.approx(ref["accept_length"]["a"])
        assert c.stats_b.accept_length == pytest.approx(ref["accept_length"]["b"])
        assert (c.stats_a.rounds, c.stats_b.rounds) == (ref["rounds"]["a"], ref["rounds"]["b"])
        dis = ref["disagreements"]
        assert c.accept_rows.size == dis["a_more"] + dis["b_more"]
        for d in dis["first_a_more"] + dis["first_b_more"]:
            assert d["position"] - 1 in c.accept_rows  # the round after x_n is row n - 1
        masked = {p["pos"] for p in evals[0]["wirings"][0]["positions"] if p["masked"]}
        parted = sorted(j for j in masked if hits[0][j] != hits[1][j])
        assert c.hit_rows.tolist() == parted and len(parted) > 0
        assert screen.rows == sorted(set(parted) | set(c.accept_rows.tolist()))
        text = str(screen.query_one("#compare-status").render())
        assert f"A τ {c.stats_a.accept_length:.2f}" in text
        assert f"{len(parted)} rows where one hits and the other misses" in text
        await pilot.press("down", "enter")  # the second row
        await until(pilot, lambda: type(app.screen).__name__ == "MainScreen")
        assert st.row == screen.rows[1]
        await pilot.press("b")  # the same sample again: from the UI cache, at once
        await until(pilot, lambda: type(app.screen).__name__ == "CompareScreen")
        assert app.screen.comparison is c


async def test_b_without_a_second_draft_says_how(tmp_path):
    app = make_app(synthetic_inputs(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("b")
        await pilot.pause()
        assert type(app.screen).__name__ == "MainScreen"
        assert "--compare CKPT_B" in app.main.messages[-1]
        await pilot.press("B")
        await pilot.pause()
        assert "no second draft to switch to" in app.main.messages[-1]


@needs_demo
async def test_a_second_draft_that_cannot_read_the_samples_is_one_line(tmp_path):
    """B (the demo's draft) reads another target than A (a tiny synthetic one): the screen
    names B's config field, the app carries on."""
    inputs = synthetic_inputs(tmp_path / "a")
    other = demo_inputs().checkpoint
    app = make_app(inputs, compare=(str(other), "train"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("b")
        await until(pilot, lambda: type(app.screen).__name__ == "CompareScreen")
        status = app.screen.query_one("#compare-status")
        await until(pilot, lambda: "compare failed" in str(status.render()), timeout=30)
        text = str(status.render())
        assert "config.json" in text and ("vocab_size" in text or "target_hidden_size" in text)
        await pilot.press("escape")
        assert type(app.screen).__name__ == "MainScreen"
        wiring = app.main.state.wiring
        await pilot.press("B")  # switching to it says the same, and A stays shown
        await until(pilot, lambda: "did not load" in app.main.messages[-1], timeout=30)
        assert "config.json" in app.main.messages[-1] and app.main.state.wiring == wiring


@needs_demo
async def test_B_switches_draft_as_a_wiring_and_f_steps_where_they_part(tmp_path, capsys):
    """`B` shows draft B as the app shows another wiring: its hits are `eval`'s of B, its τ is
    `compare`'s figure for B; with A pinned as the reference, the flipped positions are the rows
    where one draft hits and the other misses, and `f` steps through them; `B` again is A under
    the wiring it had; t and s are B's presets, w edits B's wiring."""
    from inspector.tui.drafts import is_second, second_key

    inputs, b, ref, evals = cli_figures(capsys, tmp_path)
    pos = [[p for p in e["wirings"][0]["positions"] if p["step"] == 0] for e in evals]
    parted = [p["pos"] for p, q in zip(*pos, strict=True) if p["masked"] and p["hit"] != q["hit"]]
    app = make_app(inputs, compare=(str(b), "train"))
    async with app.run_test(size=(150, 44)) as pilot:
        await settle(pilot, fill=False)
        st = app.main.state
        a_key = st.wiring
        await pilot.press("p")  # A under train is the reference
        await settle(pilot, fill=False)
        await pilot.press("B")
        await until(pilot, lambda: st.wiring is not None and is_second(st.wiring), timeout=60)
        await settle(pilot, fill=False)
        assert st.wiring == second_key(st.session.second.presets["train"])
        v = st.view
        assert v.wiring == st.wiring and v.ref[0] == a_key
        assert [bool(h) for h in v.s0.hit] == [p["hit"] for p in pos[1]]
        assert v.flipped_rows.tolist() == parted and len(parted) > 1
        header = str(app.main.header_bar.render())
        assert "fc ← B [" in header and "ref ◆ A [" in header
        await until(pilot, lambda: st.sample_accept(st.wiring) is not None, timeout=60)
        assert st.sample_accept(st.wiring).accept_length == pytest.approx(ref["accept_length"]["b"])
        assert st.sample_accept(a_key).accept_length == pytest.approx(ref["accept_length"]["a"])
        st.set_row(0)
        for want in parted[:3]:
            await pilot.press("f")
            assert st.row == want
        await pilot.press("F")
        assert st.row == parted[1]
        await pilot.press("w")  # the editor edits B's wiring, over B's own fc blocks
        await until(pilot, lambda: type(app.screen).__name__ == "WiringEditor")
        assert app.screen.session is st.session.second
        assert app.screen.original == st.session.second.presets["train"]
        await pilot.press("escape")
        await until(pilot, lambda: type(app.screen).__name__ == "MainScreen")
        await pilot.press("s")  # B's serve preset
        await settle(pilot, fill=False)
        assert st.wiring == second_key(st.session.second.presets["serve"])
        b_serve = st.wiring
        await pilot.press("B")
        await settle(pilot, fill=False)
        assert st.wiring == a_key and st.view.wiring == a_key
        await pilot.press("B")  # back to B under the wiring it was last shown with
        await settle(pilot, fill=False)
        assert st.wiring == b_serve
