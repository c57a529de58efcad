"""The app as a whole: the full flow against `eagle-inspect eval --json`, a live UI while the
device is busy, errors that leave the app working, first paint before torch, --web."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from support import capture_generated
from test_tui_support import (
    DEMO,
    GatedEvaluator,
    demo_available,
    demo_inputs,
    eval_json,
    make_app,
    screen_text,
    settle,
    synthetic_inputs,
    until,
    widget_text,
)

from inspector.cli import main as cli_main
from inspector.serving.spec import DraftSpec

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return synthetic_inputs(tmp_path_factory.mktemp("tui-flow"), n_samples=4, seq_len=48)


def fmt(c: dict) -> str:
    pct = f"{100 * c['acc']:.1f}%" if c["acc"] is not None else "-"
    return f"{c['hits']}/{c['total']} {pct}"


def pick_position(v) -> int:
    """A masked position a few steps into the sample (the 'known position' of the flow)."""
    rows = v.masked_rows
    return int(rows[min(5, len(rows) - 1)])


@pytest.mark.parametrize(
    "dataset",
    [
        "synthetic",
        pytest.param(
            "demo",
            marks=pytest.mark.skipif(not demo_available(), reason="assets/demo not built"),
        ),
    ],
)
async def test_full_flow_matches_eval_json(dataset, syn, capsys):
    """Open, go to a known position, press s: the accuracy bar shows exactly eval --json's
    numbers; pin, toggle back to train: the flipped positions are listed and steppable."""
    inputs = syn if dataset == "synthetic" else demo_inputs()
    ref = eval_json(capsys, inputs, "train", "serve", positions=True)
    train_r, serve_r = ref["wirings"]
    app = make_app(inputs)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        main = app.main
        assert main.state.wiring == tuple(train_r["wiring"])
        target = pick_position(main.state.view)
        await pilot.press("g", *str(target), "enter")
        assert main.state.rows[0] == target
        assert f"pos {target} " in widget_text(app, "#detail")

        await pilot.press("s")
        await settle(pilot)
        assert main.state.wiring == tuple(serve_r["wiring"])
        bar = widget_text(app, "#accuracy")
        s0 = serve_r["per_sample"][0]["steps"][0]
        assert fmt(s0["all_tok"]) in bar  # this sample
        assert fmt(s0["in_vocab"]) in bar
        tot = serve_r["steps"][0]
        assert fmt(tot["all_tok"]) in bar  # all samples
        assert fmt(tot["in_vocab"]) in bar
        assert f"all {ref['samples']} all-tok" in bar

        # The position detail agrees with eval --positions at that position.
        pos = next(p for p in serve_r["positions"] if p["sample"] == 0 and p["pos"] == target)
        detail = widget_text(app, "#detail")
        assert f"target {pos['true']}" in detail
        assert f"target {pos['pred_target']}" in detail
        assert f"true {pos['p_true']:.3f}" in detail

        await pilot.press("p", "t")
        await settle(pilot)
        assert main.state.wiring == tuple(train_r["wiring"]) and main.state.ref == tuple(
            serve_r["wiring"]
        )
        hits = {}
        for w in (train_r, serve_r):
            hits[tuple(w["wiring"])] = {
                p["pos"]: p["hit"] for p in w["positions"] if p["sample"] == 0 and p["step"] == 0
            }
        masked = {p["pos"] for p in train_r["positions"] if p["sample"] == 0 and p["masked"]}
        flipped = sorted(
            j
            for j in masked
            if hits[tuple(train_r["wiring"])][j] != hits[tuple(serve_r["wiring"])][j]
        )
        assert main.state.view.flipped_rows.tolist() == flipped
        bar = widget_text(app, "#accuracy")
        assert f"flipped vs ◆ {len(flipped)}" in bar
        # both rows side by side: current (train) and the pinned reference (serve)
        assert fmt(train_r["steps"][0]["all_tok"]) in bar and fmt(tot["all_tok"]) in bar
        if flipped:
            await pilot.press("home", "f")
            first = flipped[0] if flipped[0] > 0 else flipped[min(1, len(flipped) - 1)]
            assert main.state.rows[0] == first
            assert str(first) in widget_text(app, "#accuracy")
        await settle(pilot)  # the list repaints at a pause in the input
        # sample list: current, reference and Δ for sample 0
        cur = train_r["per_sample"][0]["steps"][0]["all_tok"]["acc"]
        lst = main.query_one("SampleList")
        assert lst.row_cells(0)[3] == f"{100 * cur:.1f}"


async def test_ui_repaints_while_a_forward_runs(syn):
    """The device thread is parked inside predict(); the screen still updates, keys still work,
    held keys are coalesced into one forward, and stale results are not painted."""
    from inspector.tui.loader import default_loader

    base = default_loader(syn)
    holder: dict = {}
    calls: list = []

    def loader(progress):
        res = base(progress)
        gated = GatedEvaluator(res.ev)
        orig = gated.predict

        def predict(i, w):
            calls.append((i, w.slots))
            return orig(i, w)

        gated.predict = predict  # type: ignore[method-assign]
        holder["ev"] = res.ev = gated
        return res

    app = make_app(syn, loader=loader, fill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        gated = holder["ev"]
        # Every frame the compositor produces, as terminal output (headless apps discard it).
        written: list[str] = []
        real_display = app._display

        def display(screen, renderable):
            if renderable is not None and hasattr(renderable, "render_segments"):
                written.append(renderable.render_segments(app.console))
            return real_display(screen, renderable)

        app._display = display  # type: ignore[method-assign]

        gated.gate.clear()
        gated.entered.clear()
        calls.clear()
        await pilot.press("s")  # serve: not cached, the forward blocks
        await until(pilot, lambda: gated.entered.is_set())
        await until(pilot, lambda: any("computing" in w for w in written))
        assert app.main.state.pending
        # Keys keep working while the device is busy: the cursor moves on the data shown.
        r0 = app.main.state.rows[0]
        written.clear()
        await pilot.press("right")
        await until(pilot, lambda: any(f"pos {r0 + 1}" in w for w in written))
        await pilot.press("f1")
        await until(pilot, lambda: any("Next miss" in w for w in written))
        await pilot.press("escape")
        # A held ] : three sample switches queue while blocked; only the last one is computed.
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        assert app.main.state.sample == 3
        gen = app.main.state.gen
        gated.gate.set()
        await settle(pilot, fill=False)
        assert app.main.state.view.sample == 3 and app.main.state.applied_gen == gen
        assert app.main.state.view.wiring == app.main.state.session.presets["serve"]
        computed = [i for i, _ in calls]
        assert computed[0] == 0  # the blocked forward (sample 0 under serve)
        assert {1, 2}.isdisjoint(computed[:2])  # samples 1 and 2 were skipped
        assert computed[1] == 3


async def test_the_heap_is_frozen_once_loaded_and_collected_when_idle(syn):
    """Once the device thread has loaded torch and the inputs, what is alive is moved out of the
    garbage collector's sight (gc.freeze): full collections held the GIL for 0.1-1 s on a loaded
    machine and stalled key presses during the fill. The app then collects the rest itself, in
    the pauses between inputs, and hands collection back to CPython when it closes."""
    import gc

    app = make_app(syn, fill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        assert gc.get_freeze_count() > 10_000  # torch alone is more
        assert gc.get_freeze_count() > len(gc.get_objects())  # what a full collection still scans
        for _ in range(50):
            if app.collector.running:
                break
            await pilot.pause(0.05)
        assert app.collector.running and not gc.isenabled()
        young_runs = gc.get_stats()[0]["collections"]
        await pilot.press("right")
        for _ in range(50):  # within a second of quiet, what the key press left is collected
            if gc.get_stats()[0]["collections"] > young_runs:
                break
            await pilot.pause(0.05)
        assert gc.get_stats()[0]["collections"] > young_runs
    assert gc.isenabled() and not app.collector.running


async def test_bad_sample_is_marked_and_the_app_keeps_working(tmp_path, capsys):
    inputs = synthetic_inputs(tmp_path, n_samples=3, seq_len=40)
    Path(inputs.samples[0], "data_1.pt").write_bytes(b"not a torch file")
    ref = eval_json(capsys, inputs, "train")
    app = make_app(inputs)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        main = app.main
        assert set(main.state.errors) >= {1}  # sample 1 is marked
        lst = main.query_one("SampleList")
        assert lst.row_cells(1)[0] == "✗" and lst.row_cells(1)[3] == "error"
        assert any("sample #1 skipped" in m for m in main.messages)
        assert app._notifications  # shown as a notification
        # Totals skip the bad sample, as eval does.
        assert fmt(ref["wirings"][0]["steps"][0]["all_tok"]) in widget_text(app, "#accuracy")
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert main.state.sample == 1 and main.state.view is None
        assert "sample #1: " in screen_text(app)
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert main.state.view is not None and main.state.view.sample == 2
        await pilot.press("right", "s")
        await settle(pilot)
        assert main.state.view.wiring == main.state.session.presets["serve"]


async def test_out_of_memory_is_reported_and_retried(syn):
    from inspector.tui.loader import default_loader

    base = default_loader(syn)
    fail = {"on": True}

    def loader(progress):
        res = base(progress)
        gated = GatedEvaluator(res.ev)
        orig = gated.predict

        def predict(i, w):
            if i == 1 and fail["on"]:
                raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
            return orig(i, w)

        gated.predict = predict  # type: ignore[method-assign]
        res.ev = gated
        return res

    app = make_app(syn, loader=loader, fill=False)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("right_square_bracket")
        await settle(pilot, fill=False)
        main = app.main
        assert any("out of device memory" in m for m in main.messages)
        assert main.query_one("SampleList").row_cells(1)[0] == "✗"
        fail["on"] = False
        await pilot.press("left_square_bracket", "right_square_bracket")
        await settle(pilot, fill=False)
        assert (
            main.state.view is not None
            and main.state.view.sample == 1
            and 1 not in main.state.errors
        )


async def test_bad_wiring_is_reported(syn):
    app = make_app(syn, wiring="9,9,9", fill=False)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, fill=False)
        main = app.main
        assert any("--wiring 9,9,9" in m for m in main.messages)
        assert main.state.wiring == main.state.session.presets["train"]  # fell back, still working
        assert not main.set_wiring((0, 1))
        assert any("bad wiring" in m for m in main.messages)


async def test_load_failure_keeps_the_app_up(tmp_path):
    from inspector.session import Inputs

    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text("{not json")
    inputs = Inputs(tmp_path / "draft", [str(tmp_path)], None, None, None, False)
    app = make_app(inputs)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await until(pilot, lambda: app.main.status == "load failed")
        assert "could not load" in screen_text(app)
        await pilot.press("s", "right", "e", "f1")  # nothing to act on: no crash
        await pilot.press("escape", "q")
        await pilot.pause()
        assert not app.is_running


def test_first_paint_before_torch(syn):
    """The first frame is drawn before torch (or numpy) is imported; torch loads afterwards."""
    code = textwrap.dedent(
        f"""
        import sys, time
        t0 = time.perf_counter()
        from pathlib import Path
        from inspector.session import Inputs
        from inspector.tui.app import InspectorApp
        assert "torch" not in sys.modules
        app = InspectorApp(Inputs(Path({str(syn.checkpoint)!r}), [{syn.samples[0]!r}], None, None, None, False))
        async def auto(pilot):
            while app.main.state.session is None:
                await pilot.pause(0.05)
            app.exit()
        app.run(headless=True, size=(120, 40), auto_pilot=auto)
        print(app.torch_at_first_paint, app.numpy_at_first_paint, round(app.t_first_paint - t0, 3))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    torch_then, numpy_then, _ = out.stdout.split()
    assert torch_then == "False" and numpy_then == "False"


def test_open_with_missing_demo_fails_before_the_ui(tmp_path, monkeypatch, capsys):
    from inspector.commands import open as open_cmd

    monkeypatch.setattr(open_cmd, "missing_terminal", lambda: None)  # as in a terminal
    monkeypatch.setenv("EAGLE_INSPECT_DEMO", str(tmp_path))
    assert cli_main(["open"]) == 2
    assert "demo not found" in capsys.readouterr().err


def test_web_serves_the_same_app(syn, monkeypatch):
    import textual_serve.server

    from inspector.cli import build_parser
    from inspector.commands import open as open_cmd

    seen = {}

    class FakeServer:
        def __init__(self, command, host, port, title=None):
            seen.update(command=command, host=host, port=port)

        def serve(self):
            seen["served"] = True

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    args = build_parser().parse_args(
        [
            "open",
            str(syn.checkpoint),
            syn.samples[0],
            "--web",
            "--port",
            "8123",
            "--wiring",
            "serve",
        ]
    )
    assert open_cmd.run_open(args) == 0
    assert seen["served"] and seen["host"] == "localhost" and seen["port"] == 8123
    cmd = seen["command"]
    assert "-m inspector open" in cmd and "--web" not in cmd and "--wiring serve" in cmd
    assert str(Path(syn.checkpoint).absolute()) in cmd


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
def test_bare_command_opens_the_demo(monkeypatch):
    from inspector.cli import build_parser
    from inspector.commands.open import build_app

    app = build_app(build_parser().parse_args(["open"]))
    assert Path(app.input_paths[0]) == DEMO / "draft"


async def test_slot_panel_shows_norms_blocks_and_nonfinite(tmp_path):
    import torch

    from inspector.formatting import fmt_norm

    inputs = synthetic_inputs(tmp_path, n_samples=2, seq_len=40)
    f = Path(inputs.samples[0], "data_0.pt")
    data = torch.load(f, weights_only=True)
    data["hidden_states"][3][20, 5] = float("inf")  # slot L6 (not fed under train) at position 20
    torch.save(data, f)
    app = make_app(inputs, fill=False)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, fill=False)
        main = app.main
        assert any("slot 3 contains NaN/Inf" in m for m in main.messages)
        await pilot.press("g", "2", "0", "enter")
        text = widget_text(app, "#slots")
        assert "L6 ⚠" in text
        l6 = text.splitlines()[4].replace("L6 ⚠", "L6").split()
        assert l6[2:4] == ["Inf", "Inf"]  # the norm at the cursor and the masked mean
        lines = {ln.split()[0]: ln.split() for ln in text.splitlines()[1:] if ln.strip()}
        # The other slots: the engine's norms at the cursor, the fc block fed and its weight norm.
        norms = main.state.view.data.slot_norms
        fc = main.state.session.fc_norms
        l2 = lines["L2"]
        assert l2[1] == "2" and l2[2] == fmt_norm(norms[1, 20]) and l2[4] == "b1"
        assert l2[5] == fmt_norm(fc[1])
        assert lines["embed"][4] == "b0" and lines["L4"][4] == "b2"
        await pilot.press("s")
        await settle(pilot, fill=False)
        text = widget_text(app, "#slots")
        assert "—" in text.splitlines()[1]  # embed feeds nothing under serve


async def test_ttt_steps_and_acceptance_length(syn, capsys):
    ref3 = eval_json(capsys, syn, "train", extra=("--ttt-steps", "3"))["wirings"][0]
    app = make_app(syn, ttt_steps=3)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        bar = widget_text(app, "#accuracy")
        assert "all-tok s0..s2" in bar
        # τ is the replayed chain of the app's 3 TTT steps, as eval's acceptance_length (not the
        # closed form, acceptance_length_estimate): the set's column, pooled over the rounds.
        st = app.main.state
        assert st.spec == DraftSpec(3)
        assert "accept len of a chain of 3 steps" in app.main.query_one("#accuracy").border_title
        total = st.set_accept(st.wiring)
        assert total.n_samples == len(ref3["per_sample"])
        assert total.figure.stats.accept_length == pytest.approx(ref3["acceptance_length"])
        assert f"{ref3['acceptance_length']:.2f}" in bar.splitlines()[1]
        by_step = " ".join(f"{100 * s['all_tok']['acc']:.1f}" for s in ref3["steps"])
        assert by_step in bar
        assert "K=3" in screen_text(app)
        assert "TTT" in widget_text(app, "#detail")


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
async def test_accept_length_matches_accept_json(capsys):
    """With one TTT step the app's τ replays a chain of 3 (the draft forwards its own chain, as
    `accept` does): the sample's and the set's τ are `accept --json`'s, pooled over rounds."""
    inputs = demo_inputs()
    ref = eval_json(capsys, inputs, "train", command="accept", extra=("--steps", "3"))
    w_ref = ref["wirings"][0]
    app = make_app(inputs)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        st = app.main.state
        assert st.spec == DraftSpec(3)
        total = st.set_accept(st.wiring)
        assert total.n_samples == ref["samples"]
        assert total.figure.stats.rounds == w_ref["rounds"]
        assert total.figure.stats.accept_length == pytest.approx(w_ref["accept_length"])
        mine = st.sample_accept(st.wiring)
        accepted = w_ref["per_sample"][st.sample]["accepted"]
        assert mine.stats.rounds == len(accepted) and mine.stats.accepted == sum(accepted)
        row = widget_text(app, "#accuracy").splitlines()[1]
        assert f"{mine.accept_length:.2f}" in row and f"{w_ref['accept_length']:.2f}" in row


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
async def test_the_serving_dialogs_sweep_is_accept_sweeps_and_applies_a_row(capsys):
    """Ctrl+S in the serving dialog: `accept --sweep`'s default grid on the first 8 samples
    under the current wiring, ranked by speedup as its JSON ranks it; Enter applies a row."""
    from inspector.tui.screens.sweep import N_SAMPLES

    inputs = demo_inputs()
    extra = ("--sweep", "--limit", str(N_SAMPLES))
    ref = eval_json(capsys, inputs, "train", command="accept", extra=extra)["settings"]
    by_rank = sorted(ref, key=lambda r: r["rank_speedup"])
    app = make_app(inputs)
    async with app.run_test(size=(140, 44)) as pilot:
        await settle(pilot)
        st = app.main.state
        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: type(app.screen).__name__ == "SweepScreen")
        screen = app.screen
        await until(pilot, lambda: bool(screen.lines), timeout=240)
        assert len(screen.lines) == len(ref)
        for line, r in zip(screen.lines, by_rank, strict=True):
            assert line.spec.to_dict() == r["setting"]
            assert line.accept_length == pytest.approx(r["accept_length"])
            assert line.speedup == pytest.approx(r["speedup"])
            assert line.rank_accept == r["rank_accept_length"]
        await pilot.press("down", "enter")  # the second-ranked setting
        await until(pilot, lambda: type(app.screen).__name__ == "MainScreen")
        await settle(pilot)
        assert st.spec.to_dict() == by_rank[1]["setting"]


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
async def test_serving_dialog_replays_a_tree_as_accept_json(capsys):
    """`a` sets a tree (SGLang's flags): the device thread replays the sample, then the fill the
    set; τ is `accept --steps 3 --topk 4 --draft-tokens 8`'s; `-` then drops a step."""
    inputs = demo_inputs()
    extra = ("--steps", "3", "--topk", "4", "--draft-tokens", "8")
    ref = eval_json(capsys, inputs, "train", command="accept", extra=extra)["wirings"][0]
    app = make_app(inputs)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        st = app.main.state
        chain = st.set_accept(st.wiring).figure.stats.accept_length
        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        await pilot.press("tab", "4", "tab", "8", "enter")
        await settle(pilot)
        assert st.spec == DraftSpec(3, 4, 8)
        title = app.main.query_one("#accuracy").border_title
        assert "tree of 3 steps, topk 4, 8 tokens" in title
        total = st.set_accept(st.wiring)
        assert total.n_samples == 48 and total.figure.stats.rounds == ref["rounds"]
        assert total.figure.stats.accept_length == pytest.approx(ref["accept_length"])
        row = widget_text(app, "#accuracy").splitlines()[1]
        assert f"{ref['accept_length']:.2f}" in row
        accepted = ref["per_sample"][st.sample]["accepted"]
        assert st.sample_accept(st.wiring).stats.accepted == sum(accepted)
        # The tree panel at the cursor: the same trees, the path the sample takes.
        await pilot.press("T")
        await settle(pilot, fill=False)
        trees = st.trees.get(st.trees_key())
        acc = st.current_accept()
        assert trees is not None and acc is not None
        n = len(trees.accepted)
        assert n == st.view.n_rows
        # Where rounds start, the panel's trees accept what the replay counted (elsewhere the
        # replay drafts nothing: a_by_start is 0 there).
        from inspector.formats import SampleSet
        from inspector.serving.replay import round_starts

        mask = SampleSet(inputs.samples)[st.sample].loss_mask.numpy()
        starts = round_starts(mask)
        starts = starts[starts <= n]
        assert starts.size > 10
        assert (trees.accepted[starts - 1] == acc.a_by_start[starts]).all()
        assert (trees.on_path.sum(1) == trees.accepted).all()
        assert (trees.depth[trees.on_path] <= 3).all()
        par = trees.parent
        has_parent = par >= 0
        p_parent = np.take_along_axis(trees.prob, np.maximum(par, 0), 1)
        assert (trees.prob[has_parent] <= p_parent[has_parent] + 1e-6).all()
        j = st.row
        panel = widget_text(app, "#tree")
        assert f"pos {j}  token {j + 2}  accepts {int(trees.accepted[j])} of 3" in panel
        assert panel.count("✓") == int(trees.accepted[j])
        await pilot.press("minus")
        await settle(pilot, fill=False)
        assert st.spec == DraftSpec(2, 4, 8) and st.sample_accept(st.wiring) is not None
        assert "of 2" in widget_text(app, "#tree")
        await pilot.press("a")  # back to the chain: its replays were kept
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        await pilot.press("tab", "1", "enter")
        await pilot.press("plus")
        await pilot.pause()
        assert st.spec == DraftSpec(3)
        assert st.set_accept(st.wiring).figure.stats.accept_length == chain


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
async def test_trainer_views_match_eval_json(capsys):
    """`v` shows speculators' then SpecForge's own metrics (the demo checkpoint is a speculators
    layout, so its trainer comes first), the same counts as eval --json, then ours again."""
    inputs = demo_inputs()
    ref = eval_json(capsys, inputs, "train", extra=("--ttt-steps", "2"))["wirings"][0]
    app = make_app(inputs, ttt_steps=2)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        main = app.main
        assert main.state.session.layout == "speculators" and main.state.session.has_verifier
        sample0 = ref["per_sample"][0]["steps"]
        tot = ref["steps"]
        await pilot.press("v")
        assert main.metrics == "speculators"
        bar = widget_text(app, "#accuracy")
        spec = tot[0]["trainer"]["speculators"]
        assert fmt(spec["full_acc"]) in bar and fmt(spec["cond_acc"]) in bar
        assert fmt(sample0[0]["trainer"]["speculators"]["full_acc"]) in bar
        full_by_step = " ".join(
            f"{100 * s['trainer']['speculators']['full_acc']['acc']:.1f}" for s in tot
        )
        assert f"{full_by_step}% / " in bar
        assert "speculators' own" in main.query_one("#accuracy").border_title
        await pilot.press("v")
        assert main.metrics == "specforge"
        bar = widget_text(app, "#accuracy")
        assert fmt(tot[0]["trainer"]["specforge"]["acc"]) in bar
        assert fmt(sample0[0]["trainer"]["specforge"]["acc"]) in bar
        assert f"{ref['specforge_simulated_acc_len']:.3f}" in bar
        assert fmt(tot[0]["all_tok"]) not in bar
        await pilot.press("v")
        assert main.metrics == "ours" and fmt(tot[0]["all_tok"]) in widget_text(app, "#accuracy")


async def test_trainer_view_without_target_says_it_needs_target(syn):
    app = make_app(syn, fill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("v")
        bar = widget_text(app, "#accuracy")
        assert app.main.metrics == "speculators" and "needs --target" in bar
        await pilot.press("f1")
        await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        help_md = app.screen.query_one("#help-md").content.markup  # the whole text, scrolled or not
        for term in ("full_acc_k", "cond_acc_k", "acc_k", "simulated_acc_len", "in-vocab"):
            assert f"**{term}**" in help_md
        assert "Which one is your training log?" in help_md
        await pilot.press("escape")


async def test_palette_switches_the_accuracy_view(syn):
    app = make_app(syn, fill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"accuracy view")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: app.main.metrics == "speculators")


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
async def test_an_engines_logged_figure_shows_beside_tau(tmp_path):
    """`open --engine-log FILE`: the engine's figure under the bar, τ under its draft steps."""
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 12-01 16:29:19 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.27, "
        "Accepted throughput: 1.00 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: 214 "
        "tokens, Drafted: 4010 tokens, Per-position acceptance rate: 0.219, 0.041, 0.006, 0.000, "
        "0.000, Avg Draft acceptance rate: 5.3%\n"
    )
    app = make_app(demo_inputs(), engine_log=str(log))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        st = app.main.state
        assert st.spec == DraftSpec(5)  # the log's five per-position rates: k = 5
        text = widget_text(app, "#accuracy")
        assert "vLLM logged 1.27 (vLLM 1 log line, vllm.log)" in text
        assert "chain of 5" in app.main.query_one("#accuracy").border_title


@pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
async def test_tau_on_generated_requests_is_accepts_under_both_conventions(capsys, tmp_path):
    """On `capture --generate` samples (the continuation past each stop), the app's τ is
    `accept`'s exact figure: vLLM's for the chain, SGLang's (its round after the stop included)
    for a tree; nothing is a lower bound."""
    from inspector.session import Inputs

    gen = capture_generated(tmp_path / "gen", 32)
    inputs = Inputs(DEMO / "draft", [str(gen)], target=DEMO / "target")
    chain = eval_json(capsys, inputs, "train", command="accept")["wirings"][0]
    extra = ("--steps", "3", "--topk", "4", "--draft-tokens", "8")
    tree = eval_json(capsys, inputs, "train", command="accept", extra=extra)["wirings"][0]
    assert tree["rounds_after_stop"] > 0
    app = make_app(inputs)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        st = app.main.state
        total = st.set_accept(st.wiring)
        assert total.figure.stats.rounds == chain["rounds"] and not total.figure.stats.is_bound
        assert total.figure.stats.accept_length == pytest.approx(chain["accept_length"])
        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        await pilot.press("tab", "4", "tab", "8", "enter")
        await settle(pilot)
        total = st.set_accept(st.wiring)
        assert total.figure.stats.rounds == tree["rounds"] and total.figure.stats.after_stop > 0
        assert total.figure.stats.accept_length == pytest.approx(tree["accept_length"])
        row = widget_text(app, "#accuracy").splitlines()[1]
        assert f"{tree['accept_length']:.2f}" in row and "≥" not in row


async def test_the_fills_repaints_wait_for_a_pause_in_the_input(syn):
    """While input keeps arriving, the fill's results reach the state but not the sample list
    (nor the accuracy bar: frames a key press would wait for); the first pause paints them."""
    app = make_app(syn, fill=True)

    def cur_cells() -> list[str]:
        lst = app.main.sample_list
        return [lst.row_cells(i)[3] for i in range(lst.n)]

    async with app.run_test(size=(120, 40)) as pilot:
        typing = app.inputs.quiet_s
        app.inputs.quiet_s = lambda: 0.0  # input without a pause, however slow the machine
        await until(pilot, lambda: len(app.main.state.lengths) == 4, timeout=60)
        await pilot.pause(0.3)
        assert app.main.state.scored() > 0
        assert app.main.sample_list.n == 4 and set(cur_cells()) == {"…"}
        app.inputs.quiet_s = typing  # the last input was long ago
        await until(pilot, lambda: "…" not in cur_cells(), timeout=5)


async def test_a_p_eagle_draft_in_the_app_replays_its_depths_as_accept_does(capsys):
    """P-EAGLE: the app runs every depth as a TTT step (its one forward) and replays τ's chain from
    them, as `accept --steps K` does; no sample is marked failed."""
    from inspector.session import Inputs

    golden = Path(__file__).resolve().parent / "fixtures" / "golden" / "speculators-peagle"
    inputs = Inputs(golden / "checkpoint", [str(golden / "samples")], None, None, None, False)
    ref = eval_json(capsys, inputs, "train", command="accept", extra=("--steps", "4"))
    app = make_app(inputs)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        st = app.main.state
        assert st.spec == DraftSpec(4) and not any(st.errors.values())
        total = st.set_accept(st.wiring)
        w = ref["wirings"][0]
        assert (
            total.figure.stats.rounds == w["rounds"]
            and total.figure.stats.accepted == w["accepted"]
        )
