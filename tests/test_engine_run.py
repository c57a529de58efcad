"""What an engine runs, asked by every command (`doctor.wiring.engine_run`), on drafts trained here
rather than the demo: a draft trained with norm_before_residual true (SGLang 0.5.23 reads the flag
nowhere), and the demo GGUF whose id 6 equals the layer count (llama.cpp feeds that block
nothing). Every command gives the count that engine logs, and a draft served right is never told
to change its ids."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from inspector.cli import main
from inspector.demo_paths import demo_paths
from inspector.doctor.wiring.engine_run import engine_run
from inspector.formats import load_draft

pytest.importorskip("transformers")

from support import capture_generated, vllm_line  # noqa: E402
from trained_shapes import SHAPES, train_shape  # noqa: E402

DEMO = demo_paths()


@pytest.fixture(scope="module")
def nbr(tmp_path_factory) -> Path:
    """norm_before_residual true, trained on [embed, L2, L4] (config ids [0, 2, 4]), seed 7."""
    torch.set_num_threads(2)
    root = tmp_path_factory.mktemp("nbr")
    return train_shape(SHAPES["nbr"], DEMO, root, epochs=12, ttt=2, seed=7)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 40)


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main([*argv, "--json", "--device", "cpu"])
    return rc, json.loads(capsys.readouterr().out)


def _rows(doc: dict) -> dict[str, tuple[int, int]]:
    return {w["label"]: (w["rounds"], w["accepted"]) for w in doc["wirings"]}


def test_engine_run_says_sglang_runs_the_flag_false(nbr):
    d = load_draft(nbr)
    assert d.config.norm_before_residual
    run = engine_run(d, "sglang")
    assert run.draft.config.norm_before_residual is False
    assert [f.flag for f in run.flags] == ["norm_before_residual"]
    assert run.notes() == [
        "SGLang 0.5.23 runs this draft with norm_before_residual = false (read nowhere: it runs "
        "without it)"
    ]
    assert d.config.norm_before_residual  # the draft given is not modified
    for engine in ("vllm", "llama.cpp", "llamacpp"):
        r = engine_run(d, engine)
        assert r.draft is d and not r.changed and r.notes() == []


def test_vllm_takes_an_absent_flag_as_true_in_a_speculators_config(tmp_path):
    folder = tmp_path / "absent"
    shutil.copytree(DEMO.draft, folder)
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["norm_before_residual"]
    (folder / "config.json").write_text(json.dumps(cfg))
    d = load_draft(folder)
    assert d.config.norm_before_residual is False  # speculators' own reading
    run = engine_run(d, "vllm")
    assert run.draft.config.norm_before_residual is True
    assert run.flags[0].how.startswith("absent: its default true")
    assert engine_run(d, "sglang").draft is d  # false: as the weights' trainer reads it


def test_every_command_counts_sglang_without_the_flag(capsys, nbr, generated, tmp_path):
    """accept --engine sglang on the flag-true draft is accept on a copy with the flag false;
    reconcile of the log SGLang writes for it is 'as configured', never a wrong wiring."""
    off = tmp_path / "off"
    shutil.copytree(nbr, off)
    cfg = json.loads((off / "config.json").read_text())
    cfg["norm_before_residual"] = False
    (off / "config.json").write_text(json.dumps(cfg))
    base = ["accept", "--wiring", "0,1,2", "--engine", "sglang", "--sglang-overlap", "off"]
    _, on_doc = _json(capsys, [base[0], str(nbr), str(generated), *base[1:]])
    _, off_doc = _json(capsys, [base[0], str(off), str(generated), *base[1:]])
    _, vllm_doc = _json(capsys, ["accept", str(nbr), str(generated), "--wiring", "0,1,2"])
    on, flag_off, vllm = (d["wirings"][0] for d in (on_doc, off_doc, vllm_doc))
    assert (on["rounds"], on["accepted"]) == (flag_off["rounds"], flag_off["accepted"])
    assert (vllm["rounds"], vllm["accepted"]) != (on["rounds"], on["accepted"])
    # vLLM serves the draft as configured: its log equals the configured replay
    log = tmp_path / "vllm.log"
    log.write_text(vllm_line(vllm, 3) + "\n")
    rc, r = _json(capsys, ["reconcile", str(nbr), str(generated), "--engine-log", str(log)])
    assert rc == 0
    assert r["verdict"] == "as_is", r["summary"]
    assert r["fix"] is None
    assert r["wirings_named"]["fed"] == "configured [embed, L2, L4]"
    assert "served as configured" in r["summary"], r["summary"]
    names = [w["name"] for w in r["settlement"]["witnesses"]]
    assert names[0] == "step-0 search"


def test_accept_feeds_llamacpp_nothing_for_id_l(capsys):
    """The demo GGUF's ids are [2, 4, 6] on a 6-layer Llama target: llama.cpp feeds block 2
    nothing. accept gives that feed its own row, replayed with block 2's fc columns zeroed, and
    reconcile replays the same feed to the same count."""
    gguf = DEMO.root / "engine-logs" / "deployed.gguf"
    samples = DEMO.train_samples
    argv = ["accept", str(gguf), str(samples), "--engine", "llamacpp", "--limit", "8"]
    argv += ["--target", str(DEMO.target)]
    _, doc = _json(capsys, argv)
    rows = _rows(doc)
    feed = "llama.cpp @0c1e570 GGUF feeds [L2, L4, nothing]"
    assert feed in rows
    assert rows[feed] != rows["serve [L2, L4, L6]"]  # [L2, L4, L6] fed whole: another count
    log = DEMO.root / "engine-logs" / "llamacpp-deployed-k3.log"
    argv = ["reconcile", str(gguf), str(samples), "--engine-log", str(log), "--limit", "8"]
    argv += ["--target", str(DEMO.target)]
    _, r = _json(capsys, argv)
    rec = {w["label"]: (w["rounds"], w["accepted"]) for w in r["wirings"]}
    assert rec[feed] == rows[feed]
