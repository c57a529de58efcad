"""The draft shapes of 2026 under the real engines: what each one does with each shape is what
the `draft_shape` finding says (inspector/doctor/checks/shape_support.py), to the last count.

The engine stages train the shapes on the demo (tests/trained_shapes.py) into
`<runs>/shapes/drafts/` and serve them at k = 3, greedy float32, the 8 demo prompts one at a time:

- `.ci/vllm`: fc_norm EAGLE-3.1, speculators' EAGLE-3.1 (norm_before_fc + norm_output), a Qwen3
  layer, two layers fed two slots (with num_aux_hidden_states), a draft with
  norm_before_residual: true (which vLLM reads); the two-slot draft without
  num_aux_hidden_states, which vLLM 0.32 must refuse;
- `.ci/sglang`: fc_norm EAGLE-3.1, the Qwen3 layer (run without its q/k norms), the two-layer
  draft (run without layer 1's input norm), and its copy that names that norm hidden_norm, the
  norm_before_residual draft (run with the flag false: SGLang 0.5.23 reads it nowhere);
- `.ci/llamacpp`: speculators' EAGLE-3.1 (run without norm_output), the norm_before_residual
  draft (the converter writes the flag to the GGUF, the graph reads it back), and four it refuses.

Here our live loop runs each draft as the engine runs it (`doctor.wiring.engine_run`: the flags it
ignores, the features it drops) and must give the engine's rounds and accepted tokens request for
request; where the engine runs another draft than the weights make, the draft as trained must not,
and where it reads a flag the draft sets, the draft with that flag flipped must not. A refusal's
log must hold the message the verdict quotes.
Each engine's tests skip without its stage's runs (EAGLE_VLLM_RUNS, EAGLE_SGLANG_RUNS,
EAGLE_LLAMACPP_RUNS).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from support import engine_requests, engine_run_folder, llamacpp_counts  # noqa: E402

from inspector.engines.shapes import Support  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
VLLM = os.environ.get("EAGLE_VLLM_RUNS")
SGLANG = os.environ.get("EAGLE_SGLANG_RUNS")
LLAMACPP = os.environ.get("EAGLE_LLAMACPP_RUNS")
needs_vllm = pytest.mark.skipif(not VLLM, reason="EAGLE_VLLM_RUNS unset: `bash .ci/vllm`")
needs_sglang = pytest.mark.skipif(not SGLANG, reason="EAGLE_SGLANG_RUNS unset: `bash .ci/sglang`")
needs_llamacpp = pytest.mark.skipif(
    not LLAMACPP, reason="EAGLE_LLAMACPP_RUNS unset: `bash .ci/llamacpp`"
)


def _shapes(runs: str | None) -> Path:
    return Path(runs or "") / "shapes"


def _verdict(runs, name: str, engine: str):
    from inspector.doctor.checks.draft_shape import engine_verdict
    from inspector.formats import load_draft

    return engine_verdict(load_draft(_shapes(runs) / "drafts" / name), engine)


def _run(runs, name: str, engine: str):
    """`engine_run` of the trained draft: the draft `engine` runs and why."""
    from inspector.doctor.wiring.engine_run import engine_run
    from inspector.formats import load_draft

    draft = load_draft(
        _shapes(runs) / "drafts" / name, target=DEMO / "target", dtype="float32", device="cpu"
    )
    return engine_run(draft, engine)


def _live(runs, name: str, engine: str, *, as_served: bool = True, flip: str = "") -> list:
    """Our live loop's per-request rounds over the demo prompts, the draft as `engine` runs it
    (or as trained; `flip`: with that config flag of the trained draft flipped)."""
    from dataclasses import replace

    import torch

    from inspector.engines import Engine
    from inspector.formats import load_draft
    from inspector.serving.live import LiveSettings, live_accept
    from inspector.serving.spec import DraftSpec

    if as_served:
        draft = _run(runs, name, engine).draft
    else:
        draft = load_draft(
            _shapes(runs) / "drafts" / name, target=DEMO / "target", dtype="float32", device="cpu"
        )
    if flip:
        cfg = draft.config
        draft = replace(draft, config=replace(cfg, **{flip: not getattr(cfg, flip)}))
    torch.set_num_threads(1)
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=128,
        wirings=["train"],
        target_dtype="float32",
        engine={"vllm": Engine.VLLM, "sglang": Engine.SGLANG, "llama.cpp": Engine.LLAMACPP}[engine],
    )
    report = live_accept(draft, DEMO / "target", DEMO / "prompts.jsonl", live)
    if engine == "sglang":
        report = report.without_overlap_rounds()
    return report.wirings[0].per_sample


# --- vLLM 0.32 ----------------------------------------------------------------------------------
VLLM_SERVED = [
    ("fcnorm", "fcnorm"),
    ("normfc", "normfc"),
    ("qwen3", "qwen3"),
    ("deep", "deep-n"),
    ("nbr", "nbr"),
]


def _vllm_steps(variant: str) -> tuple[dict, list[list[int]]]:
    figures = json.loads((_shapes(VLLM) / f"{variant}-k3-one" / "figures.json").read_text())
    steps = [r["spec_decode_metrics"]["per_step_accepted"] for r in figures["requests"]]
    return figures, steps


@needs_vllm
@pytest.mark.parametrize("variant,name", VLLM_SERVED)
def test_vllm_serves_the_shape_as_trained(variant, name):
    assert _verdict(VLLM, name, "vllm").support is Support.SERVES
    assert not _run(VLLM, name, "vllm").changed
    figures, steps = _vllm_steps(variant)
    ours = _live(VLLM, name, "vllm")
    assert sum(len(s.accepted) for s in ours) == figures["num_drafts"]
    assert sum(int(s.accepted.sum()) for s in ours) == figures["num_accepted_tokens"]
    for s, r in zip(ours, steps, strict=True):
        assert s.accepted.tolist() == r, s.index


@needs_vllm
def test_vllm_reads_norm_before_residual():
    """vLLM 0.32 runs the nbr draft with the flag true (the test above); the same weights with
    the flag false would have been counted otherwise."""
    _, steps = _vllm_steps("nbr")
    flipped = _live(VLLM, "nbr", "vllm", flip="norm_before_residual")
    assert [s.accepted.tolist() for s in flipped] != steps


@needs_vllm
def test_vllm_refuses_two_slots_without_num_aux_hidden_states():
    v = _verdict(VLLM, "deep", "vllm")
    assert v.support is Support.REFUSES and v.fix.startswith('write "num_aux_hidden_states": 2')
    log = (_shapes(VLLM) / "refused" / "deep-plain-k3.log").read_text(errors="replace")
    assert (
        "Tried to load weights of size torch.Size([128, 256])to a parameter of size "
        "torch.Size([128, 384])" in log
    )


# --- SGLang 0.5.23 ------------------------------------------------------------------------------
def _sglang_rounds(name: str) -> list[list[int]]:
    folder = engine_run_folder(str(_shapes(SGLANG)), f"{name}-k3-one", "SGLang")
    rounds = json.loads((folder / "rounds.json").read_text())
    return [[round(x) - 1 for x in r] for r in rounds]  # accept len - 1 = accepted drafts


@needs_sglang
@pytest.mark.parametrize(
    "name,support,flags",
    [
        ("fcnorm", Support.SERVES, {}),
        ("qwen3", Support.DROPS, {}),
        ("deep-n", Support.DROPS, {}),
        ("deep-hidden-norm", Support.SERVES, {}),
        # norm_before_residual: true, read nowhere: SGLang adds the raw fc output as the residual
        ("nbr", Support.SERVES, {"norm_before_residual": False}),
    ],
)
def test_sglang_runs_the_draft_engine_run_describes(name, support, flags):
    assert _verdict(SGLANG, name, "sglang").support is support
    run = _run(SGLANG, name, "sglang")
    assert {f.flag: f.value for f in run.flags} == flags
    for flag, value in flags.items():
        assert getattr(run.draft.config, flag) is value
        assert any(flag in n for n in run.notes()), run.notes()
    assert run.changed is (support is Support.DROPS or bool(flags))
    rounds = _sglang_rounds(name)
    ours = _live(SGLANG, name, "sglang")
    assert [s.accepted.tolist() for s in ours] == rounds
    if run.changed:  # the weights as trained (the flags as the config states them) differ
        trained = _live(SGLANG, name, "sglang", as_served=False)
        assert [s.accepted.tolist() for s in trained] != rounds


# --- llama.cpp 0c1e570 --------------------------------------------------------------------------
@needs_llamacpp
def test_llamacpp_runs_speculators_eagle_3_1_without_norm_output():
    v = _verdict(LLAMACPP, "normfc", "llama.cpp")
    assert v.support is Support.DROPS and v.dropped == "norm_output"
    reqs = engine_requests(engine_run_folder(str(_shapes(LLAMACPP)), "normfc-k3", "llama.cpp"))
    logged = [
        (r["server_counters"]["drafts"], r["server_counters"]["accepted"])
        + (r["server_counters"]["draft_tokens"],)
        for r in reqs
    ]
    assert [llamacpp_counts(s) for s in _live(LLAMACPP, "normfc", "llama.cpp")] == logged
    trained = _live(LLAMACPP, "normfc", "llama.cpp", as_served=False)
    assert [llamacpp_counts(s) for s in trained] != logged


@needs_llamacpp
def test_llamacpp_reads_norm_before_residual_back_from_the_gguf():
    """The converter writes norm_before_residual: true to the GGUF and the eagle3 graph reads it
    back: the draft as trained, and the flag-false loop would have been counted otherwise."""
    assert _verdict(LLAMACPP, "nbr", "llama.cpp").support is Support.SERVES
    run = _run(LLAMACPP, "nbr", "llama.cpp")
    assert not run.changed and run.draft.config.norm_before_residual is True
    reqs = engine_requests(engine_run_folder(str(_shapes(LLAMACPP)), "nbr-k3", "llama.cpp"))
    logged = [
        (r["server_counters"]["drafts"], r["server_counters"]["accepted"])
        + (r["server_counters"]["draft_tokens"],)
        for r in reqs
    ]
    assert [llamacpp_counts(s) for s in _live(LLAMACPP, "nbr", "llama.cpp")] == logged
    flipped = _live(LLAMACPP, "nbr", "llama.cpp", flip="norm_before_residual")
    assert [llamacpp_counts(s) for s in flipped] != logged


@needs_llamacpp
@pytest.mark.parametrize("name", ["fcnorm", "qwen3", "deep-n", "wide-n"])
def test_llamacpp_refuses_with_the_message_the_verdict_quotes(name):
    v = _verdict(LLAMACPP, name, "llama.cpp")
    assert v.support is Support.REFUSES
    quoted = re.findall(r'"([^"]+)"', " ".join(v.why))
    assert quoted, v.why
    refused = _shapes(LLAMACPP) / "refused"
    text = (refused / f"{name}.log").read_text(errors="replace")
    for f in (refused / name).rglob("*.log"):
        text += f.read_text(errors="replace")
    for q in quoted:
        assert q in text, (name, q)
