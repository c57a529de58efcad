"""The real SGLang against us: its figures on the bundled demo, to the last count.

`bash .ci/sglang` runs SGLang 0.5.23's CPU backend on the demo target and draft (float32 through
its reference attention, greedy, 128 tokens, decode_log_interval 1): the shipped draft as a chain
at k = 1, 3, 5 and as a tree (topk 4, 8 draft tokens), and a copy whose eagle_config ids are the
HF indices [0, 2, 4] copied verbatim (SGLang's Llama file adds 1 to every id: it feeds
[L1, L3, L5]), and points EAGLE_SGLANG_RUNS at the results. SGLang forces its overlap scheduler
off for speculative decoding on CPU, so our counts are taken without the round it would run after
each request's stop (`--sglang-overlap off`). Here:

- the replay of `capture --generate` samples gives every request's spec_verify_ct and
  spec_num_correct_drafts, the one-at-a-time run's every round, and the pooled counts of its
  'accept len' lines, exactly, chain and tree;
- so does the live loop, and it generates SGLang's very tokens;
- `reconcile` reads SGLang's own log lines and per-request dump: "the draft is what it is" for
  the shipped draft, and for the copy "your engine feeds the wrong layers", naming the layers it
  fed, the trained ones and SGLang's ids for them.

Where SGLang's greedy text differs from ours (it does not in float32 here), the first differing
token is reported and the counts compared up to it.

Without EAGLE_SGLANG_RUNS these tests skip: the main suite does not install the engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RUNS = os.environ.get("EAGLE_SGLANG_RUNS")
pytestmark = pytest.mark.skipif(
    not RUNS, reason="EAGLE_SGLANG_RUNS unset: `bash .ci/sglang` runs the real SGLang and these"
)
pytest.importorskip("transformers")

from support import (  # noqa: E402
    capture_generated,
    engine_requests,
    engine_run_folder,
    first_differences,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
MAX_TOKENS = 128
TRAIN = (0, 1, 2)  # embed, L2, L4 over the capture's slots HF [0, 2, 4, 6]
CHAINS = [("demo-k1-batch", 1), ("demo-k3-one", 3), ("demo-k3-batch", 3), ("demo-k5-batch", 5)]
TREE = "demo-k3-t4-n8-batch"
# reconcile of the demo draft through the live loop over the engine's prompts (no samples)
PROMPTS = (
    str(DEMO / "draft"),
    "--prompts",
    str(DEMO / "prompts.jsonl"),
    "--target",
    str(DEMO / "target"),
    "--dtype",
    "float32",
)


def _folder(name: str) -> Path:
    return engine_run_folder(RUNS, name, "SGLang")


def _requests(name: str) -> list[dict]:
    return engine_requests(_folder(name))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """`capture --generate 128 --save-dtype float32` of the demo prompts."""
    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", MAX_TOKENS)


def _replay(samples: Path, spec) -> list:
    """The shipped draft's replay under SGLang's count, without the overlap round: per
    sample, its rounds' accepted counts."""
    from inspector.engines import Engine
    from inspector.serving.replay import Replayer
    from inspector.session import Inputs, load_evaluator
    from inspector.wiring import Wiring

    ev = load_evaluator(
        Inputs(DEMO / "draft", [str(samples)], DEMO / "target"),
        device="cpu",
        dtype="float32",
        ttt_steps=spec.steps if spec.is_chain else 1,
    )
    report = Replayer(ev, spec, Engine.SGLANG).run([Wiring(TRAIN)]).without_overlap_rounds()
    return report.wirings[0].per_sample


def _assert_counts(per_sample: list, name: str, samples: Path) -> None:
    reqs = _requests(name)
    assert len(per_sample) == len(reqs)
    differ = first_differences(samples, reqs)
    assert not differ, f"{name}: SGLang's greedy text leaves ours at (request, token) {differ}"
    for s, r in zip(per_sample, reqs, strict=True):
        m = r["meta_info"]
        got = (len(s.accepted), int(s.accepted.sum()))
        assert got == (m["spec_verify_ct"], m["spec_num_correct_drafts"]), (name, s.index)
    if name.endswith("-one"):  # a line per round, batch size 1: correct drafts = accept len - 1
        rounds = json.loads((_folder(name) / "rounds.json").read_text())
        for s, lens in zip(per_sample, rounds, strict=True):
            assert s.accepted.tolist() == [round(x) - 1 for x in lens], (name, s.index)
    from inspector.formats.engine_log import read_engine_log

    log = read_engine_log(_folder(name) / "sglang.log", decode_log_interval=1)
    rounds = sum(len(s.accepted) for s in per_sample)
    accepted = sum(int(s.accepted.sum()) for s in per_sample)
    assert (log.rounds, log.accepted) == (rounds, accepted), name


@pytest.mark.parametrize(("name", "k"), CHAINS)
def test_the_replay_gives_sglangs_counts_exactly(name, k, generated):
    from inspector.serving.spec import DraftSpec

    _assert_counts(_replay(generated, DraftSpec(k)), name, generated)


def test_the_tree_replay_gives_sglangs_counts_exactly(generated):
    """topk 4, 8 draft tokens: SGLang's draft decode lets each beam row read its own row's
    earlier KV (`--kv sglang`)."""
    from inspector.serving.spec import DraftSpec

    _assert_counts(_replay(generated, DraftSpec(3, 4, 8, kv="sglang")), TREE, generated)


def test_the_live_loop_gives_sglangs_counts_and_tokens(tmp_path):
    from inspector.engines import Engine
    from inspector.formats import load_draft
    from inspector.serving.live import LiveSettings, live_accept
    from inspector.serving.spec import DraftSpec

    draft = load_draft(DEMO / "draft", target=DEMO / "target", dtype="float32", device="cpu")
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=MAX_TOKENS,
        wirings=[list(TRAIN)],
        target_dtype="float32",
        engine=Engine.SGLANG,
        out=tmp_path / "live",
    )
    report = live_accept(
        draft, DEMO / "target", DEMO / "prompts.jsonl", live
    ).without_overlap_rounds()
    _assert_counts(
        report.wirings[0].per_sample, "demo-k3-batch", tmp_path / "live" / "wiring-0-1-2"
    )


def _reconcile(capsys, *argv: str) -> dict:
    from inspector.cli import main
    from inspector.commands.exit_codes import for_verdict

    capsys.readouterr()
    rc = main(["reconcile", *argv, "--json", "--device", "cpu", "--decode-log-interval", "1"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == for_verdict(doc["verdict"])  # 0 as is, 1 a problem found
    return doc


@pytest.mark.parametrize("mode", ["one", "batch"])
@pytest.mark.parametrize("source", ["sglang.log", "requests.jsonl"])
def test_reconcile_reads_sglangs_own_files(mode, source, generated, capsys):
    log = _folder(f"demo-k3-{mode}") / source
    doc = _reconcile(capsys, str(DEMO / "draft"), str(generated), "--engine-log", str(log))
    assert doc["verdict"] == "as_is", doc["summary"]
    assert doc["engine_log"]["engine"] == "sglang"
    trained = next(w for w in doc["wirings"] if w["label"] == doc["wirings_named"]["fed"])
    assert trained["equal"] and trained["wiring"] == list(TRAIN)
    if source == "requests.jsonl":
        assert doc["requests_matched"] == 8 and trained["requests_equal"] == 8
    else:  # the log's decode lines show a CPU: no overlap round counted
        assert doc["config"]["overlap_scheduler"] is False
        assert (doc["engine_log"]["rounds"], doc["engine_log"]["accepted"]) == (
            trained["rounds"],
            trained["accepted"],
        )


@pytest.mark.parametrize("mode", ["one", "batch"])
@pytest.mark.parametrize("source", ["sglang.log", "requests.jsonl"])
def test_reconcile_names_the_layers_a_miswired_sglang_fed(mode, source, capsys):
    """The copy's eagle_config holds the HF indices [0, 2, 4]: SGLang adds 1 and feeds
    [L1, L3, L5], a wiring neither the config nor any preset names. `--prompts` captures every
    layer of the 6-layer target, so the replay of what an engine reading the ids one off feeds
    is there to equal the log."""
    log = _folder(f"miswired-k3-{mode}") / source
    doc = _reconcile(capsys, *PROMPTS, "--engine-log", str(log))
    assert doc["verdict"] == "wrong_wiring", doc["summary"]
    named = doc["wirings_named"]
    assert named["fed"] == "ids +1 [L1, L3, L5]", named
    assert named["trained"].endswith("[embed, L2, L4]")
    assert "eagle_config ids [-1, 1, 3] for SGLang 0.5.23" in doc["fix"]
    fed = next(w for w in doc["wirings"] if w["label"] == named["fed"])
    reqs = _requests(f"miswired-k3-{mode}")
    rounds = sum(r["meta_info"]["spec_verify_ct"] for r in reqs)
    accepted = sum(r["meta_info"]["spec_num_correct_drafts"] for r in reqs)
    assert (fed["rounds"], fed["accepted"]) == (rounds, accepted)


@pytest.mark.parametrize("variant", ["demo", "miswired"])
def test_reconcile_reads_sglangs_server_info(variant, generated, tmp_path, capsys):
    """`get_server_info()`'s `internal_states[0].avg_spec_accept_length`, as SGLang returned it
    after the batch (run_sglang.py keeps it in figures.json), in the server-info shape: the
    shipped draft is as it is; the copy fed [L1, L3, L5] is the wrong layers (a pooled figure
    alone, so only within its rounding). Server info does not say where it ran: the CPU run's
    missing overlap round is given (`--sglang-overlap off`)."""
    fig = json.loads((_folder(f"{variant}-k3-batch") / "figures.json").read_text())
    info = tmp_path / "server_info.json"
    value = fig["avg_spec_accept_length_after"]
    info.write_text(json.dumps({"internal_states": [{"avg_spec_accept_length": value}]}))
    if variant == "demo":
        doc = _reconcile(
            capsys,
            str(DEMO / "draft"),
            str(generated),
            "--engine-log",
            str(info),
            "--sglang-overlap",
            "off",
        )
        assert doc["verdict"] == "as_is", doc["summary"]
        return
    doc = _reconcile(
        capsys,
        *PROMPTS,
        "--max-new",
        str(MAX_TOKENS),
        "--engine-log",
        str(info),
        "--sglang-overlap",
        "off",
    )
    assert doc["verdict"] == "wrong_wiring", doc["summary"]
    assert doc["wirings_named"]["fed"] == "ids +1 [L1, L3, L5]"
