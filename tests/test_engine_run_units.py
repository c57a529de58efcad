"""engine_run's parts on the bundled demo (no training): the flags each engine reads otherwise,
the feed it replays (a block fed nothing zeroed), the notes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

from inspector.demo_paths import demo_paths
from inspector.doctor.wiring.engine_run import EngineRun, FlagChange, engine_run, flag_changes
from inspector.formats import load_draft
from inspector.formats.samples import v1_slot_info

DEMO = demo_paths()
GGUF = DEMO.root / "engine-logs" / "deployed.gguf"
# the demo's slots: embed, L2, L4, L6 (HF 0, 2, 4, 6; 6 the verifier's pre-norm state)
INFOS = v1_slot_info([0, 2, 4, 6])


def _copy(tmp_path, **keys):
    folder = tmp_path / "draft"
    shutil.copytree(DEMO.draft, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(keys)
    (folder / "config.json").write_text(json.dumps(cfg))
    return load_draft(folder)


def test_sglang_reads_norm_before_residual_nowhere(tmp_path):
    d = _copy(tmp_path, norm_before_residual=True)
    assert flag_changes(d, "sglang") == (
        FlagChange("norm_before_residual", False, "read nowhere: it runs without it"),
    )
    assert flag_changes(d, "vllm") == ()
    assert flag_changes(d, "llama.cpp") == ()
    run = engine_run(d, "sglang")
    assert run.changed and run.who == "SGLang 0.5.23"
    assert run.draft.config.norm_before_residual is False
    assert run.draft.weights is d.weights  # only the flag differs
    assert FlagChange("x", True, "why").words() == "x = true (why)"


def test_an_unchanged_draft_is_the_same_object():
    d = load_draft(DEMO.draft)
    for engine in ("vllm", "sglang", "llamacpp"):
        run = engine_run(d, engine)
        assert run.draft is d and not run.changed and run.notes() == [] and run.read is None
        assert run.fed is None and run.feed(INFOS) is None  # no layer count: no feed


def test_the_feed_of_each_engine_on_the_demo(tmp_path):
    d = load_draft(DEMO.draft)
    vllm = engine_run(d, "vllm", num_layers=6)
    assert vllm.fed == (0, 2, 4) and vllm.who == "vLLM 0.32"
    w, draft, label = vllm.feed(INFOS)
    assert w.slots == (0, 1, 2) and draft is d
    assert label == "vLLM 0.32 feeds [embed, L2, L4]"
    # SGLang does not load a speculators config: no feed to replay
    assert engine_run(d, "sglang", num_layers=6).feed(INFOS) is None
    # a layer the slots lack: no feed to replay
    assert engine_run(d, "vllm", num_layers=6).feed(v1_slot_info([0, 2, 6])) is None


def test_llamacpp_feeds_nothing_for_id_l():
    pytest.importorskip("gguf")
    d = load_draft(GGUF, target=DEMO.target)
    run = engine_run(d, "llamacpp", num_layers=6)
    assert run.engine == "llamacpp" and run.fed == (2, 4, None)
    w, silent, label = run.feed(INFOS)
    assert w.slots == (1, 2, 0)
    assert label == "llama.cpp @0c1e570 GGUF feeds [L2, L4, nothing]"
    ht = d.config.target_hidden_size
    fc = silent.weights["fc.weight"]
    assert torch.equal(fc[:, 2 * ht :], torch.zeros_like(fc[:, 2 * ht :]))
    assert torch.equal(fc[:, : 2 * ht], d.weights["fc.weight"][:, : 2 * ht])
    assert not torch.equal(d.weights["fc.weight"][:, 2 * ht :], fc[:, 2 * ht :])
    # under one norm over every block a zero block cannot be replayed
    normed = EngineRun(
        run.engine, replace(d, config=replace(d.config, norm_before_fc=True)), read=run.read
    )
    assert normed.feed(INFOS) is None


def test_the_notes_name_the_release_and_the_shape(tmp_path):
    d = _copy(tmp_path, norm_before_residual=True)
    assert engine_run(d, "sglang").notes() == [
        "SGLang 0.5.23 runs this draft with norm_before_residual = false (read nowhere: it runs "
        "without it)"
    ]
    n = _copy(tmp_path / "n", norm_output=True)
    notes = engine_run(n, "llama.cpp").notes()
    assert len(notes) == 1 and notes[0].startswith(
        "llama.cpp @0c1e570 runs this draft without norm_output ("
    )


def test_a_draft_without_a_file_runs_as_its_config_says():
    d = load_draft(DEMO.draft)
    bare = replace(d, path="", config=replace(d.config, norm_before_residual=True))
    for engine in ("vllm", "sglang", "llama.cpp"):
        assert flag_changes(bare, engine) == ()
        assert engine_run(bare, engine).draft is bare


def test_the_fingerprint_witness_is_measured_only_when_asked(tmp_path):
    from inspector.doctor.wiring.trained import find_trained_wiring
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet

    d = _copy(tmp_path, eagle_aux_hidden_state_layer_ids=[2, 4, 6])
    ev = Evaluator(d, SampleSet([str(DEMO.train_samples)]))
    assert find_trained_wiring(ev, samples=[0, 1]).fingerprint_flags is None
    asked = find_trained_wiring(ev, samples=[0, 1], fingerprint=True)
    assert asked.configured == (1, 2, 3) and asked.wiring == (0, 1, 2)
    assert asked.fingerprint_flags is True  # L6 fed where embed was trained: off by far over 2x
