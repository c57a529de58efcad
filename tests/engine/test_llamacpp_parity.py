"""The real llama.cpp against us: its figures on the bundled demo, to the last count.

`bash .ci/llamacpp` builds `llama-server` from the llama-cpp-python 0.3.36 sdist's vendored
llama.cpp, converts the demo target and three drafts with llama.cpp's own converter, serves them
greedy (float32, 128 tokens, the 8 demo prompts one at a time) at --spec-draft-n-max 1, 3, 5, and
points EAGLE_LLAMACPP_RUNS at the results:

- "demo": the draft as shipped (ids [0, 2, 4]);
- "reversed": a copy configured [4, 2, 0]: llama.cpp feeds the states in the order listed,
  [L4, L2, embed] (vLLM would feed them ascending, the trained wiring);
- "last": a copy configured [2, 4, 6]. Id 6 is the layer count: llama.cpp captures the input of
  layer i and a Llama target has no layer 6, so that fc block gets nothing (zeros on the fresh
  server each request gets). We replay [L2, L4, nothing] with that block's fc columns zeroed;
- "nested": a copy with its ids under eagle_config, where the converter does not look: it bakes
  its fallback [2, L//2, L-3] = [2, 3, 3], and llama.cpp feeds L3 to two fc blocks.

Here: per request, our replay of `capture --generate` samples under llama-server's schedule gives
the server's own counter deltas (verification rounds, drafted and accepted tokens) and its
`timings`; pooled, its /metrics (accepted per position too) and its log's statistics lines; the
live loop gives the same and llama.cpp's very tokens; the GGUF llama.cpp's converter wrote gives
our `eval` figures of its HF source exactly; `reconcile` reads llama.cpp's log and /metrics and
names each copy's fault and fix; the doctor names the baked layers of the mis-converted GGUFs.

Where llama.cpp's greedy text differs from ours (it does not in float32 here), the first
differing token is reported. Without EAGLE_LLAMACPP_RUNS these tests skip: the main suite does
not build the engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RUNS = os.environ.get("EAGLE_LLAMACPP_RUNS")
pytestmark = pytest.mark.skipif(
    not RUNS, reason="EAGLE_LLAMACPP_RUNS unset: `bash .ci/llamacpp` runs the real llama.cpp"
)
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from support import (  # noqa: E402
    capture_generated,
    engine_requests,
    engine_run_folder,
    first_differences,
    llamacpp_counts,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
MAX_TOKENS = 128
# what llama.cpp feeds each copy, as HF indices per fc block (None: nothing, zeros)
FED = {"demo": (0, 2, 4), "reversed": (4, 2, 0), "last": (2, 4, None)}
RUNS_K = [("demo", 1), ("demo", 3), ("demo", 5), ("reversed", 1), ("reversed", 3)]
RUNS_K += [("reversed", 5), ("last", 1), ("last", 3)]


def _folder(name: str) -> Path:
    return engine_run_folder(RUNS, name, "llama.cpp")


def _requests(name: str) -> list[dict]:
    return engine_requests(_folder(name))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """`capture --generate 128 --save-dtype float32` of the demo prompts (slots embed, L2, L4,
    L6)."""
    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", MAX_TOKENS)


def _evaluator(samples: Path, k: int, fed: tuple):
    """The demo draft over `samples`, as llama.cpp runs it fed `fed`: (evaluator, wiring)."""
    from inspector.doctor.wiring.fed_states import silenced, silent_blocks, slots_fed
    from inspector.session import Inputs, load_evaluator
    from inspector.wiring import Wiring

    ev = load_evaluator(
        Inputs(DEMO / "draft", [str(samples)], DEMO / "target"),
        device="cpu",
        dtype="float32",
        ttt_steps=k,
    )
    slots = slots_fed(fed, ev.slot_info)
    assert slots is not None
    if silent_blocks(fed):
        ev = ev.with_draft(silenced(ev.draft, silent_blocks(fed)))
    return ev, Wiring(slots)


def _replay(samples: Path, k: int, fed: tuple) -> list:
    from inspector.engines import Engine
    from inspector.serving.replay import Replayer
    from inspector.serving.spec import DraftSpec

    ev, wiring = _evaluator(samples, k, fed)
    return Replayer(ev, DraftSpec(k), Engine.LLAMACPP).run([wiring]).wirings[0].per_sample


def _assertllamacpp_counts(per_sample: list, name: str, samples: Path) -> None:
    reqs = _requests(name)
    assert len(per_sample) == len(reqs)
    differ = first_differences(samples, reqs)
    assert not differ, f"{name}: llama.cpp's greedy text leaves ours at (request, token) {differ}"
    for s, r in zip(per_sample, reqs, strict=True):
        c = r["server_counters"]
        assert llamacpp_counts(s) == (c["drafts"], c["accepted"], c["draft_tokens"]), (
            name,
            s.index,
        )
        t = r["timings"]
        assert (llamacpp_counts(s)[1], llamacpp_counts(s)[2]) == (
            t["draft_n_accepted"],
            t["draft_n"],
        )


@pytest.mark.parametrize(("variant", "k"), RUNS_K)
def test_the_replay_gives_llama_servers_counts_exactly(variant, k, generated):
    """Every request's verification rounds, drafted and accepted tokens (the server's counter
    deltas and its `timings`), and the pooled /metrics and statistics lines."""
    from inspector.formats.engine_log import read_engine_log

    name = f"{variant}-k{k}"
    per_sample = _replay(generated, k, FED[variant])
    _assertllamacpp_counts(per_sample, name, generated)
    rounds = sum(llamacpp_counts(s)[0] for s in per_sample)
    accepted = sum(llamacpp_counts(s)[1] for s in per_sample)
    log = read_engine_log(_folder(name) / "server.log")
    assert (log.rounds, log.accepted, log.rounded) == (rounds, accepted, False), name
    if variant == "demo":  # one server for all 8 requests: its /metrics is the run's
        prom = read_engine_log(_folder(name) / "metrics.prom")
        assert (prom.rounds, prom.accepted) == (rounds, accepted)
        at_least = [sum(int((s.accepted > i).sum()) for s in per_sample) for i in range(k)]
        assert prom.accepted_per_pos == at_least


def test_zeros_replay_llama_server_at_k5_but_for_bytes_it_never_wrote(generated):
    """At --spec-draft-n-max 5 the copy configured [2, 4, 6] gives llama-server's counts on 6 of
    the 8 requests; on two, llama.cpp counts one round more and one accepted token fewer than
    zeros in that block give, in float32 and bfloat16 alike (not a near-tie). The block reads a
    buffer the Llama graph never writes (src/llama-context.cpp): zeros on a fresh server at
    k <= 3 here, other bytes once its 6-row verification batches reach past them. Held to
    that: at most 2 requests differ, each by one round and one token at most."""
    per_sample = _replay(generated, 5, FED["last"])
    reqs = _requests("last-k5")
    assert not first_differences(generated, reqs)
    off = []
    for s, r in zip(per_sample, reqs, strict=True):
        c = r["server_counters"]
        ours, theirs = llamacpp_counts(s), (c["drafts"], c["accepted"], c["draft_tokens"])
        if ours != theirs:
            off.append(s.index)
            assert abs(ours[0] - theirs[0]) <= 1 and abs(ours[1] - theirs[1]) <= 1, (s.index, ours)
    assert len(off) <= 2, off


def test_the_live_loop_gives_llamacpps_counts_and_tokens(tmp_path):
    from inspector.engines import Engine
    from inspector.formats import load_draft
    from inspector.serving.live import LiveSettings, live_accept
    from inspector.serving.spec import DraftSpec

    draft = load_draft(DEMO / "draft", target=DEMO / "target", dtype="float32", device="cpu")
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=MAX_TOKENS,
        wirings=[[0, 1, 2]],
        target_dtype="float32",
        engine=Engine.LLAMACPP,
        out=tmp_path / "live",
    )
    report = live_accept(draft, DEMO / "target", DEMO / "prompts.jsonl", live)
    _assertllamacpp_counts(
        report.wirings[0].per_sample, "demo-k3", tmp_path / "live" / "wiring-0-1-2"
    )


def _eval(draft: Path, samples: Path) -> dict:
    import contextlib
    import io

    from inspector.cli import main

    buf = io.StringIO()
    argv = ["eval", str(draft), str(samples), "--wiring", "0,1,2", "--json", "--device", "cpu"]
    with contextlib.redirect_stdout(buf):
        assert main([*argv, "--target", str(DEMO / "target")]) == 0
    return json.loads(buf.getvalue())


def test_the_converted_gguf_evaluates_as_its_source(generated):
    """llama.cpp's converter wrote the demo draft in F32: every count `eval` gives equals the
    HF source's (the d2t written as absolute ids read back as offsets, the norms, fc, lm_head)."""
    gguf = Path(RUNS or "") / "demo.gguf"
    ours, theirs = _eval(DEMO / "draft", generated), _eval(gguf, generated)
    a, b = ours["wirings"][0], theirs["wirings"][0]
    assert a["steps"] == b["steps"]


def _reconcile(capsys, draft: Path | str, *argv: str) -> dict:
    from inspector.cli import main
    from inspector.commands.exit_codes import for_verdict

    capsys.readouterr()
    rc = main(["reconcile", str(draft), *argv, "--json", "--device", "cpu"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == for_verdict(doc["verdict"])  # 0 as is, 1 a problem found
    return doc


@pytest.mark.parametrize("source", ["server.log", "metrics.prom"])
def test_reconcile_reads_llamacpps_own_files_for_the_shipped_draft(source, generated, capsys):
    log = _folder("demo-k3") / source
    doc = _reconcile(capsys, DEMO / "draft", str(generated), "--engine-log", str(log))
    assert doc["verdict"] == "as_is", doc["summary"]
    assert doc["engine_log"]["engine"] == "llamacpp"
    fed = next(w for w in doc["wirings"] if w["label"] == doc["wirings_named"]["fed"])
    assert fed["equal"] and fed["wiring"] == [0, 1, 2]


def _copy(name: str, tmp: Path) -> Path:
    """The HF draft folder the stage converted as `name` (its config as written)."""
    import shutil

    folder = tmp / name
    shutil.copytree(DEMO / "draft", folder)
    shutil.copy(Path(RUNS or "") / f"{name}.config.json", folder / "config.json")
    return folder


def test_reconcile_names_the_id_that_feeds_nothing(generated, capsys, tmp_path):
    """The copy configured [2, 4, 6], served by llama.cpp: its log equals [L2, L4, nothing]
    exactly; the weights were trained on [embed, L2, L4]; the fix is the ids [0, 2, 4]."""
    log = _folder("last-k3") / "server.log"
    doc = _reconcile(capsys, _copy("last", tmp_path), str(generated), "--engine-log", str(log))
    assert doc["verdict"] == "wrong_wiring", doc["summary"]
    assert "exactly what this draft gives fed [L2, L4, nothing]" in doc["summary"]
    assert "trained on [embed, L2, L4]" in doc["summary"]
    assert "[0, 2, 4]" in doc["fix"]
    silent = next(w for w in doc["wirings"] if w["label"].endswith("[L2, L4, nothing]"))
    assert silent["equal"]
    assert (silent["rounds"], silent["accepted"]) == (
        doc["engine_log"]["rounds"],
        doc["engine_log"]["accepted"],
    )


def test_reconcile_of_the_nested_copy_through_its_gguf(capsys):
    """The copy whose ids sit under eagle_config, as its GGUF (baked [2, 3, 3]) and llama.cpp's
    log: the live loop over the prompts (every layer captured) gives llama.cpp's figure fed
    [L2, L3, L3], and names the trained wiring."""
    log = _folder("nested-k3") / "server.log"
    gguf = Path(RUNS or "") / "nested.gguf"
    doc = _reconcile(
        capsys,
        gguf,
        "--prompts",
        str(DEMO / "prompts.jsonl"),
        "--target",
        str(DEMO / "target"),
        "--dtype",
        "float32",
        "--engine-log",
        str(log),
    )
    assert doc["verdict"] == "wrong_wiring", doc["summary"]
    assert "fed [L2, L3, L3]" in doc["summary"], doc["summary"]
    assert "trained on [embed, L2, L4]" in doc["summary"]
    assert "convert it again" in doc["fix"] and "[0, 2, 4]" in doc["fix"]


def _doctor(capsys, *argv: str) -> dict:
    from inspector.cli import main

    capsys.readouterr()
    main(["doctor", *argv, "--json", "--device", "cpu"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("name", "baked", "changed"), [("last", [2, 4, 6], False), ("nested", [2, 3, 3], True)]
)
def test_the_doctor_names_the_baked_layers_and_the_fix(
    name, baked, changed, generated, capsys, tmp_path
):
    """The GGUFs llama.cpp's converter wrote from the mis-configured copies: the doctor reads
    the baked layers, the trained wiring, and with --source what the conversion changed: for
    the [2, 4, 6] copy nothing but the weights' rounding (its config is the fault), for the
    nested copy the ids (the converter's silent fallback)."""
    gguf = Path(RUNS or "") / f"{name}.gguf"
    doc = _doctor(capsys, str(gguf), str(generated), "--target", str(DEMO / "target"))
    layers = next(f for f in doc["findings"] if f["kind"] == "gguf_layers")
    assert layers["severity"] == "error", layers["summary"]
    assert str(baked) in layers["summary"]
    assert "[embed, L2, L4]" in layers["summary"] or "[0, 2, 4]" in layers["summary"]
    src = _copy(name, tmp_path)
    doc = _doctor(
        capsys, str(gguf), str(generated), "--source", str(src), "--target", str(DEMO / "target")
    )
    conv = next(f for f in doc["findings"] if f["kind"] == "gguf_conversion")
    if changed:
        assert conv["severity"] == "warning", conv["summary"]
        assert "changed the layer ids" in conv["summary"], conv["summary"]
        ids = conv["evidence"]["layer_ids"]
        assert ids["gguf_ids_from"] == "fallback" and ids["converter_fallback"] == [2, 3, 3]
        assert "convert again" in conv["fix"]
    else:
        assert conv["severity"] == "info", conv["summary"]
        assert "changed nothing but the weights' rounding" in conv["summary"]
