"""The doctor on drafts of the 2026 shapes that were trained (tests/trained_shapes.py: the demo's
trainer on the demo's samples, a few seconds each): it finds the wiring each was trained on in
its own wiring space, tells which EAGLE-3.1 it is and what each engine does with it, and names a
config that selects other slots than the trained ones."""

from __future__ import annotations

import json
import shutil

import pytest
import trained_shapes as ts

from inspector.commands.exit_codes import for_verdict
from inspector.doctor import DiagnoseSettings, diagnose
from inspector.doctor.finding import Severity
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

pytestmark = pytest.mark.usefixtures("one_thread")
N = 4  # doctor samples: the draft's own training samples


@pytest.fixture(scope="module")
def trained(demo, tmp_path_factory):
    """name -> (checkpoint folder, sample folder), every shape trained once per module."""
    root = tmp_path_factory.mktemp("shapes")
    return {
        name: (
            ts.train_shape(shape, demo, root, epochs=12, ttt=1),
            ts.samples_for(shape, demo, root),
        )
        for name, shape in ts.SHAPES.items()
    }


def _doctor(folder, samples, engines=None):
    ev = Evaluator(load_draft(folder, strict=False), SampleSet(samples))
    return diagnose(ev, DiagnoseSettings(N, engines=engines))


@pytest.fixture(scope="module")
def reports(trained):
    return {name: _doctor(*trained[name]) for name in ts.SHAPES}


@pytest.mark.parametrize("name", list(ts.SHAPES))
def test_the_doctor_finds_the_trained_wiring(reports, name):
    """Searched over every ordered choice of N of the samples' slots, the trained wiring wins
    (and is what the doctor recommends)."""
    report = reports[name]
    trained = ts.SHAPES[name].wiring
    assert report.best_wiring == trained, [(w.wiring, w.all_tok.fmt()) for w in report.wirings]
    assert report.serve_wiring == trained
    assert all(len(w.wiring) == len(trained) for w in report.wirings)


@pytest.mark.parametrize(
    "name,flag",
    [("fcnorm", "fc_norm"), ("normfc", "norm_before_fc")],
)
def test_the_norm_the_weights_were_trained_with(reports, name, flag):
    """Scored with and without its norm, the draft fits the one it was trained with."""
    f = reports[name].finding(flag)
    assert f.severity is Severity.INFO
    assert f.evidence["as_configured"]["hits"] > f.evidence["flipped"]["hits"]
    assert f"{flag}=true with its weights fits" in f.summary


def test_the_same_weights_with_the_other_norm_flag(trained, tmp_path):
    """An fc_norm draft whose config lost the flag (the tensors still stored): the doctor says it
    was trained with fc_norm, and the shape is the classic one engines would run it as."""
    folder, samples = trained["fcnorm"]
    copy = tmp_path / "lost-flag"
    shutil.copytree(folder, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["fc_norm"] = False
    (copy / "config.json").write_text(json.dumps(cfg))
    report = _doctor(copy, samples)
    f = report.finding("fc_norm")
    assert f.severity in (Severity.WARNING, Severity.ERROR)
    assert "it was trained with true" in f.summary
    shape = report.finding("draft_shape")
    assert shape is not None and "fc_norm" not in shape.summary  # as config.json states it


EXPECTED: dict[str, tuple[str, list[str]]] = {
    # name: (variant words, [vLLM, SGLang, llama.cpp] verdict openings)
    "fcnorm": (
        "EAGLE-3.1 as the paper and vLLM mean it",
        ["vLLM 0.32 serves it", "SGLang 0.5.23 serves it", "llama.cpp @0c1e570 refuses it"],
    ),
    "normfc": (
        "EAGLE-3.1 as speculators first shipped it",
        [
            "vLLM 0.32 serves it",
            "SGLang 0.5.23 serves it",
            "llama.cpp @0c1e570 runs it without norm_output",
        ],
    ),
    "qwen3": (
        "Qwen3 layer (q/k norms)",
        [
            "vLLM 0.32 serves it",
            "SGLang 0.5.23 runs it without its q/k norms",
            "llama.cpp @0c1e570 refuses it",
        ],
    ),
    "deep": (
        "2 slots, 2 decoder layers",
        [
            "vLLM 0.32 refuses it",
            "SGLang 0.5.23 runs it without the input norms of layers 1 and up",
            "llama.cpp @0c1e570 refuses it",
        ],
    ),
    "wide": (
        "4 slots, 1 decoder layer",
        ["vLLM 0.32 refuses it", "SGLang 0.5.23 serves it", "llama.cpp @0c1e570 refuses it"],
    ),
    "single": (
        "1 slot, 1 decoder layer",
        ["vLLM 0.32 refuses it", "SGLang 0.5.23 serves it", "llama.cpp @0c1e570 refuses it"],
    ),
}


# every shape but nbr, whose shape is the classic one: what SGLang does with its flag is
# engine_run's (tests/test_engine_run.py), not a shape rule
@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_shape_and_what_each_engine_does_with_it(reports, name):
    f = reports[name].finding("draft_shape")
    variant, verdicts = EXPECTED[name]
    assert f is not None and variant in f.summary
    for v in verdicts:
        assert v in f.summary, (v, f.summary)
    assert f.severity is Severity.WARNING  # every shape here has an engine that does not serve it
    assert f.fix


def test_a_two_slot_draft_configured_with_the_wrong_layers(trained, tmp_path):
    """SpecDrift's shape deployed with ids naming other layers: the wiring error names the two
    trained slots, searched among the 12 ordered pairs."""
    folder, samples = trained["deep"]
    copy = tmp_path / "deep-miswired"
    shutil.copytree(folder, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [4, 6]
    (copy / "config.json").write_text(json.dumps(cfg))
    report = _doctor(copy, samples)
    w = report.finding("wiring")
    assert w.severity is Severity.ERROR
    assert report.configured_wiring == (2, 3) and report.serve_wiring == (1, 2)
    assert "[L2, L4]" in w.summary and len(report.wirings) == 12


def test_a_head_trained_on_the_post_norm_state(reports):
    """The single-slot head trained on the target's final post-norm state, configured with the
    last layer's id (which engines capture before the norm): the doctor finds the post-norm slot
    and says no engine feeds it."""
    report = reports["single"]
    assert report.serve_wiring == (ts.POST_NORM_SLOT,)
    assert report.configured_wiring == (4,)
    assert report.slots[ts.POST_NORM_SLOT].post_norm
    feeds = report.finding("engine_feeds")
    assert feeds is not None and feeds.severity is Severity.ERROR
    assert "final(post-norm)" in feeds.summary


def _accept(capsys, folder, samples, engine: str) -> tuple[dict, str]:
    from inspector.cli import main

    capsys.readouterr()
    argv = ["accept", str(folder), str(samples), "--engine", engine, "--limit", "3"]
    assert main([*argv, "--json", "--device", "cpu", "--sglang-overlap", "off"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def test_accept_counts_the_draft_the_engine_runs(trained, capsys):
    """`accept --engine sglang` on a Qwen3-layer draft replays it without its q/k norms, as
    SGLang 0.5.23 runs it (its counts equalled SGLang's own, request for request), and says so;
    vLLM runs the draft as trained."""
    from inspector.doctor.checks.draft_shape import as_engine_runs
    from inspector.engines import Engine
    from inspector.serving.replay import Replayer
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring

    folder, samples = trained["qwen3"]
    vllm, vllm_err = _accept(capsys, folder, samples, "vllm")
    sglang, sglang_err = _accept(capsys, folder, samples, "sglang")
    assert "runs this draft without" not in vllm_err
    assert "note: SGLang 0.5.23 runs this draft without its q/k norms" in sglang_err
    served, verdict = as_engine_runs(load_draft(folder), "sglang")
    assert "layers.0.self_attn.q_norm.weight" not in served.weights and verdict is not None
    ev = Evaluator(served, SampleSet(samples), ttt_steps=3)
    want = Replayer(ev, DraftSpec(3), Engine.SGLANG).run([Wiring((0, 1, 2))], limit=3)
    want = want.without_overlap_rounds().wirings[0].to_dict()
    got = sglang["wirings"][0]
    assert (got["rounds"], got["accepted"]) == (want["rounds"], want["accepted"])
    assert (got["rounds"], got["accepted"]) != (
        vllm["wirings"][0]["rounds"],
        vllm["wirings"][0]["accepted"],
    )


def test_reconcile_replays_the_draft_sglang_runs(trained, capsys, tmp_path):
    """reconcile of an SGLang log: the configured wiring replayed on the Qwen3 draft without
    its q/k norms, as `accept --engine sglang` counts it; the wiring search keeps the weights."""
    from inspector.cli import main

    folder, samples = trained["qwen3"]
    log = tmp_path / "sglang.log"
    log.write_text(
        "[2026-12-01 16:29:00] server_args={'speculative_num_steps': 3, "
        "'speculative_eagle_topk': 1}\n"
        "[2026-12-01 16:30:02] Decode batch, #running-req: 1, #token: 900, token usage: 0.01, "
        "accept len: 1.31, accept rate: 0.44, cpu graph: True, gen throughput (token/s): 300.1, "
        "#queue-req: 0\n"
    )
    capsys.readouterr()
    argv = ["reconcile", str(folder), str(samples), "--engine-log", str(log), "--limit", "3"]
    rc = main([*argv, "--device", "cpu", "--json"])
    out = capsys.readouterr()
    assert rc == for_verdict(json.loads(out.out)["verdict"])
    assert "note: SGLang 0.5.23 runs this draft without its q/k norms" in out.err
    configured = json.loads(out.out)["wirings"][0]
    assert configured["wiring"] == [0, 1, 2]
    sglang, _ = _accept(capsys, folder, samples, "sglang")
    assert (configured["rounds"], configured["accepted"]) == (
        sglang["wirings"][0]["rounds"],
        sglang["wirings"][0]["accepted"],
    )
    assert json.loads(out.out)["trained_search"]  # searched on the weights as trained
