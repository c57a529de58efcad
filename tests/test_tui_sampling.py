"""τ at a temperature in the app: the expected accept length under the engine's rule, the same
figure `accept SAMPLES --target T --temperature` gives, for the sample and pooled over the set;
the serving dialog's sampling fields; what happens without a target; the doctor screen quoting
the same temperature."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_tui_support import (
    demo_available,
    demo_inputs,
    eval_json,
    make_app,
    settle,
    synthetic_inputs,
    until,
    widget_text,
)

from inspector.serving.sampling_settings import (
    Sampling,
    SamplingSettings,
    Verification,
    VerifyRule,
)
from inspector.serving.spec import DraftSpec
from inspector.tui.tau_settings import Serving

needs_demo = pytest.mark.skipif(not demo_available(), reason="assets/demo not built")
AT_07 = SamplingSettings(Sampling(0.7), Verification(VerifyRule.VLLM_ONEHOT))


# accept's JSON gives each round's E[a] to 6 decimals: a mean of them is off by 5e-7 at most.
PER_ROUND = 5e-7


def sample_expected(per_sample: dict) -> float:
    """One request's expected accept length from accept's JSON (1 + sum E[a] / rounds)."""
    e = per_sample["expected"]
    return 1 + sum(e) / len(e)


@needs_demo
async def test_tau_at_a_temperature_is_accepts_expectation_for_the_sample_and_the_set(
    capsys, monkeypatch
):
    """`open --temperature 0.7`: τ is the expectation under vLLM's one-hot rule, pooled over
    the set's rounds exactly as `accept --temperature 0.7` pools them; the doctor screen then
    quotes the same temperature, with the target τ loaded (one load for both)."""
    from inspector.capture import transformers_target as target_module

    loads = []

    class Counted(target_module.TargetModel):
        def __init__(self, *a, **kw):
            loads.append(a)
            super().__init__(*a, **kw)

    inputs = demo_inputs()
    ref = eval_json(capsys, inputs, "train", command="accept", extra=("--temperature", "0.7"))
    w_ref = ref["wirings"][0]
    monkeypatch.setattr(target_module, "TargetModel", Counted)
    app = make_app(inputs, sampling=AT_07)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, timeout=180)
        st = app.main.state
        assert st.serving == Serving(DraftSpec(3), AT_07)
        total = st.set_accept(st.wiring)
        assert total.n_samples == ref["samples"]
        figure = total.figure
        assert figure.odds.rounds == w_ref["rounds"] == figure.stats.rounds
        assert figure.accept_length == pytest.approx(w_ref["expected"]["accept_length"], 1e-12)
        assert figure.accept_length < figure.stats.accept_length  # not the greedy walk's count
        assert figure.odds.per_depth == pytest.approx(w_ref["expected"]["per_depth"], 1e-12)
        mine = st.sample_accept(st.wiring)
        expected = sample_expected(w_ref["per_sample"][st.sample])
        assert mine.accept_length == pytest.approx(expected, abs=PER_ROUND)
        acc = st.current_accept()
        assert acc.expected.tolist() == pytest.approx(
            w_ref["per_sample"][st.sample]["expected"], abs=PER_ROUND
        )
        title = app.main.query_one("#accuracy").border_title
        assert "τ: expected accept len of a chain of 3 steps at temperature 0.7" in title
        assert "vllm-onehot verification" in title
        row = widget_text(app, "#accuracy").splitlines()[1]
        assert f"{expected:.2f}" in row and f"{figure.accept_length:.2f}" in row

        await pilot.press("d")
        await until(
            pilot,
            lambda: type(app.screen).__name__ == "DoctorScreen" and app.screen.report,
            timeout=240,
        )
        (wiring,) = [f for f in app.screen.report.findings if f.kind == "wiring"]
        assert "temperature 0.7, vllm-onehot verification, expected" in wiring.summary
        assert len(loads) == 1  # τ's target, which the doctor used too


@needs_demo
async def test_the_dialog_sets_a_temperature_and_a_tree_takes_sglangs_rule(capsys):
    """`a`, then a temperature: τ of this sample is accept's expectation; a tree at that
    temperature is verified with SGLang's target-only rule; 0 is greedy again, at once."""
    inputs = demo_inputs()
    chain = eval_json(capsys, inputs, "train", command="accept", extra=("--temperature", "0.7"))
    tree_flags = ("--steps", "3", "--topk", "4", "--draft-tokens", "8", "--temperature", "0.7")
    tree = eval_json(capsys, inputs, "train", command="accept", extra=tree_flags)
    app = make_app(inputs)
    async with app.run_test(size=(140, 48)) as pilot:
        await settle(pilot, fill=False)
        st = app.main.state
        greedy = st.sample_accept(st.wiring).accept_length
        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        await pilot.press("tab", "tab", "tab")  # steps -> topk -> tokens -> temperature
        app.screen.focused.value = "0.7"
        await pilot.press("enter")
        await settle(pilot, fill=False, timeout=60)
        assert st.serving == Serving(DraftSpec(3), AT_07)
        mine = st.sample_accept(st.wiring)
        per = chain["wirings"][0]["per_sample"][st.sample]
        assert mine.accept_length == pytest.approx(sample_expected(per), abs=PER_ROUND)
        assert any("at temperature 0.7" in m for m in app.main.messages)

        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        assert app.screen.query_one("#serving-temperature").value == "0.7"
        app.screen.query_one("#serving-topk").value = "4"
        app.screen.query_one("#serving-tokens").value = "8"
        app.screen.apply()
        await settle(pilot, fill=False, timeout=60)
        assert st.spec == DraftSpec(3, 4, 8)
        assert st.serving.sampling.verification.rule is VerifyRule.SGLANG_TARGET_ONLY
        per = tree["wirings"][0]["per_sample"][st.sample]
        assert tree["config"]["sampling"]["verification"]["rule"] == "sglang-target-only"
        assert st.sample_accept(st.wiring).accept_length == pytest.approx(
            sample_expected(per), abs=PER_ROUND
        )
        assert "sglang-target-only" in app.main.query_one("#accuracy").border_title

        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        for key, value in (("topk", "1"), ("tokens", ""), ("temperature", "0")):
            app.screen.query_one(f"#serving-{key}").value = value
        app.screen.apply()
        await pilot.pause()
        assert st.serving == Serving(DraftSpec(3))  # greedy: the replays kept, shown at once
        assert st.sample_accept(st.wiring).accept_length == greedy


async def test_the_dialog_refuses_what_cannot_be_served(tmp_path):
    """Without a target a temperature is refused by name; a chain with SGLang's thresholds is
    not a vLLM setting; the dialog stays open with the reason."""
    app = make_app(synthetic_inputs(tmp_path))
    async with app.run_test(size=(120, 48)) as pilot:
        await settle(pilot, fill=False)
        st = app.main.state
        await pilot.press("a")
        await until(pilot, lambda: type(app.screen).__name__ == "ServingScreen")
        screen = app.screen
        screen.query_one("#serving-temperature").value = "0.7"
        screen.apply()
        error = str(screen.query_one("#serving-error").render())
        assert "--target" in error and app.screen is screen
        screen.has_target = True  # as if opened with one: the thresholds are SGLang's, on trees
        screen.query_one("#serving-threshold_single").value = "0.5"
        screen.apply()
        assert "SGLang" in str(screen.query_one("#serving-error").render())
        screen.query_one("#serving-top_p").value = "1.5"
        screen.apply()
        assert str(screen.query_one("#serving-error").render()).startswith("top-p: ")  # by name
        await pilot.press("escape")
        assert st.serving == Serving(DraftSpec(3))


async def test_a_temperature_without_a_target_leaves_tau_greedy_and_no_sample_failed(tmp_path):
    """The target a temperature needs is missing: the settings' fault, said once; τ goes back
    to greedy and every sample stays usable."""
    app = make_app(synthetic_inputs(tmp_path), sampling=AT_07)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        st = app.main.state
        await until(pilot, lambda: st.serving is not None and st.serving.greedy)
        await settle(pilot)
        assert not st.errors
        said = [m for m in app.main.messages if "τ stays greedy" in m]
        assert len(said) == 1 and "--target" in said[0]
        assert st.set_accept(st.wiring).n_samples == st.n_samples


def test_open_at_a_temperature_needs_a_target(tmp_path, capsys, monkeypatch):
    from inspector.cli import main
    from inspector.commands import open as open_cmd
    from inspector.commands.open import web_command

    monkeypatch.setattr(open_cmd, "missing_terminal", lambda: None)  # as in a terminal
    from inspector.serving.sampling_settings import VerifyRule

    inputs = synthetic_inputs(tmp_path)
    argv = ["open", str(inputs.checkpoint), *inputs.samples, "--temperature", "0.7"]
    capsys.readouterr()
    assert main(argv) == 2
    assert "--temperature" in capsys.readouterr().err

    import argparse

    from inspector.commands.open import initial_sampling

    args = argparse.Namespace(temperature=0.6, top_k=20, top_p=0.95)
    s = initial_sampling(args, has_target=True)
    assert s.sampling == Sampling(0.6, 20, 0.95) and s.verification.rule is VerifyRule.VLLM_ONEHOT
    assert initial_sampling(argparse.Namespace(temperature=0, top_k=0, top_p=1), False) is None
    web = argparse.Namespace(
        checkpoint=None, samples=[], target="auto", embed=None, tokenizer=None, prompts=None,
        engine_log=None, device="cpu", dtype="auto", ttt_steps=1, wiring=None,
        slot_layers=None, memory_budget=None, temperature=0.6, top_k=20, top_p=0.95,
        compare=None, compare_wiring="train",
    )  # fmt: skip
    cmd = web_command(web)
    assert "--target auto" in cmd and "--temperature 0.6 --top-k 20 --top-p 0.95" in cmd
    assert Path(web.target).name == "auto"
