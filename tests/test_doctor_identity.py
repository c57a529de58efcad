"""Slot identity on planted reproductions built from the demo (a 6-layer target; a draft trained
on HF [0, 2, 4] of samples holding HF [0, 2, 4, 6]): the doctor decides what each slot is from
the evidence, gives the right serving ids when it can and none when it cannot, and runs the
target to catch a slot that is not what the file says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from support import edited_copy

from inspector.doctor import DiagnoseSettings, diagnose
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft

N = 3
TRAIN = (0, 1, 2)
PROSE = "HF output_hidden_states index: 0 = embedding output, k = output of decoder layer k-1"


def _samples(demo, out: Path, edit, slots=None) -> Path:
    """The demo's first N samples with data_config.json edited by `edit(cfg)` and each sample's
    slots by `slots(list)`."""
    out.mkdir(parents=True, exist_ok=True)
    for i in range(N):
        src = demo.train_samples / f"data_{i}.pt"
        if slots is None:
            shutil.copy(src, out / f"data_{i}.pt")
        else:
            data = torch.load(src, weights_only=True)
            data["hidden_states"] = slots(list(data["hidden_states"]))
            torch.save(data, out / f"data_{i}.pt")
    cfg = json.loads((demo.train_samples / "data_config.json").read_text())
    for key in ("index_convention", "index_note", "labels"):
        cfg["hidden_states"].pop(key, None)
    cfg.pop("target", None)  # the copy is elsewhere: the relative path names nothing
    edit(cfg)
    (out / "data_config.json").write_text(json.dumps(cfg))
    return out


def _prose(cfg: dict) -> None:
    cfg["hidden_states"]["layer_id_convention"] = PROSE
    cfg["num_hidden_layers"] = 6


@pytest.fixture(scope="module")
def prose(demo, tmp_path_factory) -> Path:
    """The issue's samples: layer_ids [0, 2, 4, 6], num_hidden_layers 6, a prose convention."""
    return _samples(demo, tmp_path_factory.mktemp("prose"), _prose)


@pytest.fixture(scope="module")
def unstated(demo, tmp_path_factory) -> Path:
    """layer_ids [0, 2, 4, 6] and nothing that says which convention they use."""
    return _samples(demo, tmp_path_factory.mktemp("unstated"), lambda cfg: None)


@pytest.fixture(scope="module")
def no_ids(demo, tmp_path_factory) -> Path:
    """The draft with its aux ids removed, as nvidia/Llama-3.3-70B-Instruct-Eagle3 ships."""
    return edited_copy(
        demo.draft,
        tmp_path_factory.mktemp("noids") / "draft",
        config=lambda c: c.pop("eagle_aux_hidden_state_layer_ids"),
    )


def _run(draft: Path, samples: Path, **kw):
    ev = Evaluator(load_draft(draft, strict=False), SampleSet(samples))
    return diagnose(ev, DiagnoseSettings(N, **kw))


def _ids(report) -> tuple[list[int] | None, list[int] | None]:
    sc = report.serving_config.to_dict()
    if "vllm" not in sc:
        return None, None
    return (
        sc["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"],
        sc["sglang"]["config"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
    )


def test_ids_present_and_right_get_no_warning(demo, prose):
    report = _run(demo.draft, prose)
    assert [s.label for s in report.slots] == ["embed", "L2", "L4", "L6"]
    assert [f"{f.kind}: {f.summary}" for f in report.findings if f.is_problem] == []
    assert report.configured_wiring == TRAIN and report.best_wiring == TRAIN
    assert _ids(report) == ([0, 2, 4], [-1, 1, 3])
    f = report.finding("slot_identity")
    assert f.severity == "info" and "decided by the layer count (6 layers" in f.summary
    assert "assumed" not in report.finding("wiring").summary
    d = report.to_dict()
    assert d["slot_identity"]["decided_by"] == "layer count"
    assert [s["hf_index"] for s in d["slots"]] == [0, 2, 4, 6]
    # And with the target given: measured, still no warning.
    with_target = _run(demo.draft, prose, target=demo.target)
    assert [f.summary for f in with_target.findings if f.is_problem] == []
    assert with_target.to_dict()["slot_identity"]["decided_by"] == "the target"
    assert _ids(with_target) == ([0, 2, 4], [-1, 1, 3])


def test_prose_alone_decides(demo, tmp_path):
    samples = _samples(
        demo, tmp_path / "s", lambda c: c["hidden_states"].update(layer_id_convention=PROSE)
    )
    report = _run(demo.draft, samples)
    assert [s.hf_index for s in report.slots] == [0, 2, 4, 6]
    assert "decided by its layer_id_convention" in report.finding("slot_identity").summary
    assert _ids(report) == ([0, 2, 4], [-1, 1, 3])


def test_config_without_ids_gets_the_trained_ids(no_ids, prose):
    report = _run(no_ids, prose)
    labels = [s.label for s in report.slots]
    assert labels == ["embed", "L2", "L4", "L6"] and "L7" not in json.dumps(report.to_dict())
    assert report.best_wiring == TRAIN and report.configured_wiring is None
    assert _ids(report) == ([0, 2, 4], [-1, 1, 3])
    # the copied samples name no target: SGLang's ids under both readings of its model files
    by_rule = report.serving_config.to_dict()["sglang"]["layer_ids_by_rule"]
    assert by_rule == {"every": [-1, 1, 3], "first-is-1": [0, 2, 4]}
    w = report.finding("wiring")
    assert "[0, 2, 4]" in w.fix and "[1, 3, 5]" not in w.fix + w.summary


def test_config_without_ids_and_undecided_samples_gets_no_ids(no_ids, unstated):
    report = _run(no_ids, unstated)
    assert _ids(report) == (None, None)
    sc = report.serving_config.to_dict()
    assert sc["undecided"] == [[1, 3, 5], [0, 2, 4]] and sc["reproducible"] is None
    s = report.finding("serving_config")
    assert s.severity == "warning" and "no engine ids" in s.summary
    assert "[1, 3, 5]" not in s.fix and "[0, 2, 4]" not in s.fix
    f = report.finding("slot_identity")
    assert f.severity == "warning"
    assert "read as decoder-layer output ids" in f.summary and "are HF [1, 3, 5, 7]" in f.summary
    assert "read as HF indices the slots are HF [0, 2, 4, 6]" in f.summary
    assert "--target" in f.fix and "index_convention" in f.fix
    # Nothing that feeds an engine depends on the guess, the written config included.
    from inspector.doctor import plan_fix

    assert plan_fix(report).hf_indices is None
    w = report.finding("wiring")
    assert "[1, 3, 5]" not in w.fix and "eagle_aux_hidden_state_layer_ids [" not in w.fix


def test_undecided_samples_with_a_configured_draft_say_what_the_ids_fit(demo, unstated):
    report = _run(demo.draft, unstated)
    f = report.finding("slot_identity")
    assert "name captured slots when they are read as HF indices" in f.summary
    assert "not decisive" in f.summary
    assert report.to_dict()["slot_identity"]["draft_ids_fit"] == ["hf"]


# --- the target at hand -------------------------------------------------------------------------
def test_the_target_decides_an_unstated_file(demo, no_ids, unstated):
    report = _run(no_ids, unstated, target=demo.target)
    assert [s.hf_index for s in report.slots] == [0, 2, 4, 6]
    f = report.finding("slot_identity")
    assert f.severity == "info" and "slot 3 = HF 6" in f.summary and "as read agrees" in f.summary
    ident = report.to_dict()["slot_identity"]
    assert ident["decided_by"] == "the target" and ident["mismatches"] == []
    # The target's layer count alone rules out decoder-layer outputs for id 6.
    assert ident["data_config"]["decided_by"] == "layer count"
    assert [m["matched"] for m in ident["target"]["matches"]] == [0, 2, 4, 6]
    assert all(m["relative_error"] < 0.0078 for m in ident["target"]["matches"])
    assert _ids(report) == ([0, 2, 4], [-1, 1, 3])
    assert "assumed" not in report.finding("wiring").summary


def test_the_target_settles_what_the_layer_count_cannot(demo, tmp_path):
    """ids [0, 2, 4] fit a 6-layer target in both readings; only the states tell."""

    def three(cfg):
        cfg["hidden_states"]["layer_ids"] = [0, 2, 4]

    samples = _samples(demo, tmp_path / "three", three, slots=lambda hs: hs[:3])
    without = _run(demo.draft, samples)
    assert [s.hf_index for s in without.slots] == [1, 3, 5]
    assert without.finding("slot_identity").severity == "warning"
    report = _run(demo.draft, samples, target=demo.target)
    assert [s.hf_index for s in report.slots] == [0, 2, 4]
    f = report.finding("slot_identity")
    assert f.severity == "info" and "so data_config.json hidden_states.layer_ids" in f.summary
    assert "holds HF indices" in f.summary
    assert report.to_dict()["slot_identity"]["settled"] == "hf"
    assert report.configured_wiring == (0, 1, 2)


def test_a_last_slot_captured_one_layer_early(demo, tmp_path):
    """TorchSpec#87: the "last hidden state" is HF 4 stored as HF 6."""
    samples = _samples(
        demo, tmp_path / "early", _prose, slots=lambda hs: [hs[0], hs[1], hs[2], hs[2].clone()]
    )
    report = _run(demo.draft, samples, target=demo.target)
    f = report.finding("slot_identity")
    assert f.severity == "error"
    assert "slot 3 is stored as HF 6 (the verifier's last state" in f.summary
    assert "but equals HF 4" in f.summary
    assert "recapture slot 3 from HF 6" in f.fix and "vLLM id 6, not 5" in f.fix
    (m,) = report.to_dict()["slot_identity"]["mismatches"]
    assert m == {"slot": 3, "claimed": 6, "actual": 4, "verifier": True}
    assert report.best_wiring == TRAIN and _ids(report) == ([0, 2, 4], [-1, 1, 3])
    # Without the target nothing can tell.
    assert _run(demo.draft, samples).finding("slot_identity").severity == "info"


def test_a_slot_that_equals_no_state(demo, tmp_path):
    samples = _samples(
        demo, tmp_path / "other", _prose, slots=lambda hs: [hs[0], hs[1] * 1.05, hs[2], hs[3]]
    )
    report = _run(demo.draft, samples, target=demo.target)
    f = report.finding("slot_identity")
    assert f.severity == "error" and "slot 1 is stored as HF 2 but equals no state" in f.summary
    assert (
        "slot 1 is stored as HF 2 but equals no state of this target: captured from another "
        "layer convention, another model revision, or a quantized or rotated target"
    ) in f.summary, f.summary
    assert "deployed target" in f.fix
    assert report.to_dict()["slot_identity"]["mismatches"][0]["actual"] is None
    assert report.slots[1].hf_index == 2  # as claimed: nothing better is known


def test_an_unusable_target_is_said_not_raised(demo, prose, tmp_path):
    (tmp_path / "t").mkdir()
    report = _run(demo.draft, prose, target=tmp_path / "t")
    f = report.finding("slot_identity")
    assert f.severity == "info" and "the target was not run" in f.summary
    assert "config.json" in f.summary


# --- what engines feed a config without ids -----------------------------------------------------
def _layers(ids: list[int], n_layers: int):
    def edit(cfg):
        cfg["hidden_states"]["layer_ids"] = ids
        cfg["hidden_states"]["layer_id_convention"] = PROSE
        cfg["num_hidden_layers"] = n_layers

    return edit


def test_engine_default_that_cannot_serve(no_ids, prose):
    """On the 6-layer demo target [2, L//2, L-3] = [2, 3, 3]: two states for three fc blocks."""
    w = _run(no_ids, prose).finding("wiring")
    assert w.severity == "error"
    assert "vLLM, SGLang before #25454, SGLang since #25454 feed HF [2, 3]" in w.summary
    assert "is [2, 3, 3]; a layer listed twice is captured once" in w.summary
    assert "2 states for an fc of 3 blocks, so they cannot serve this draft" in w.summary
    assert w.fix.startswith(
        "pin the trained wiring: set eagle_aux_hidden_state_layer_ids [0, 2, 4]"
    )
    (feed,) = w.evidence["engine_defaults"]
    assert feed == {
        "engines": ["vLLM", "SGLang before #25454", "SGLang since #25454"],
        "hf_indices": [2, 3],
        "wiring": None,
        "missing": [3],
        "serves": False,
    }
    assert w.evidence["num_layers"] == 6


def test_engine_default_scored_when_the_samples_hold_it(demo, no_ids, tmp_path):
    """An 8-layer reading: the engines feed HF [2, 4, 5], which the planted slots hold."""
    samples = _samples(demo, tmp_path / "eight", _layers([0, 2, 4, 5], 8))
    report = _run(no_ids, samples)
    w = report.finding("wiring")
    assert w.severity == "error" and w.wiring == TRAIN
    assert "feed HF [2, 4, 5] ([2, L//2, L-3] with L = 8): [L2, L4, L5], which scores" in w.summary
    assert "(-47.3 points)" in w.summary and "an engine feeding" not in w.summary
    assert report.wiring_result((1, 2, 3)).roles == ["serve", "engine default"]
    assert w.evidence["named"]["engine default"]["wiring"] == [1, 2, 3]
    assert _ids(report) == ([0, 2, 4], [-1, 1, 3])
    # A configured draft gets the engine default scored too, but no word on it.
    configured = _run(demo.draft, samples)
    assert "engine default" in configured.wiring_result((1, 2, 3)).roles
    assert "engine_defaults" not in configured.finding("wiring").evidence


def test_engine_default_the_samples_lack(demo, no_ids, tmp_path):
    samples = _samples(demo, tmp_path / "lack", _layers([0, 2, 4, 6], 8))
    w = _run(no_ids, samples).finding("wiring")
    assert "feed HF [2, 4, 5] ([2, L//2, L-3] with L = 8); the samples lack HF [5]" in w.summary
    assert "--draft CKPT --engine vllm` captures" in w.summary
    assert w.severity == "warning"


def test_engine_default_without_a_layer_count(no_ids, unstated):
    w = _run(no_ids, unstated).finding("wiring")
    assert (
        "feed HF [2, L//2, L-3] of an L-layer target, and the layer count is unknown" in w.summary
    )
    assert w.evidence["engine_defaults"] == [] and w.severity == "warning"


def test_every_view_labels_with_the_targets_layer_count(demo, unstated, capsys):
    from inspector.cli import main

    base = [str(demo.draft), str(unstated), "--limit", "1", "--json"]
    assert main(["eval", *base]) == 0
    assert [s["label"] for s in json.loads(capsys.readouterr().out)["slots"]] == [
        "L1",
        "L3",
        "L5",
        "L7",
    ]
    assert main(["eval", *base, "--target", str(demo.target)]) == 0
    assert [s["label"] for s in json.loads(capsys.readouterr().out)["slots"]] == [
        "embed",
        "L2",
        "L4",
        "L6",
    ]


# --- were the tokens written by the target? ------------------------------------------------------
def test_target_data_on_sampled_regeneration(demo, prose):
    f = _run(demo.draft, prose, target=demo.target).finding("target_data")
    assert f.severity == "info" and "are the target's own greedy choice" in f.summary
    agree = f.evidence["target_argmax_tokens"]
    assert agree["total"] == 226 and 0.35 < agree["acc"] < 0.6  # sampled at 0.7
    assert f.evidence["samples"] == [0, 1]


def test_target_data_on_tokens_the_target_did_not_write(demo, tmp_path):
    """The continuations shuffled: text the target did not write (its stored states no longer
    match the target either)."""

    def shuffle(path):
        data = torch.load(path, weights_only=True)
        ids, mask = data["input_ids"], data["loss_mask"].bool()
        g = torch.Generator().manual_seed(0)
        ids[mask] = ids[mask][torch.randperm(int(mask.sum()), generator=g)]
        torch.save(data, path)

    samples = _samples(demo, tmp_path / "shuffled", _prose)
    for i in range(N):
        shuffle(samples / f"data_{i}.pt")
    f = _run(demo.draft, samples, target=demo.target).finding("target_data")
    assert f.severity == "warning" and f.summary.startswith("only ")
    assert "regenerate the responses with the target" in f.fix
    assert f.evidence["target_argmax_tokens"]["acc"] < 0.2
    assert _run(demo.draft, samples).finding("target_data") is None  # needs the target


def test_the_target_runs_on_the_readable_samples(demo, tmp_path):
    samples = _samples(demo, tmp_path / "broken", _prose)
    (samples / "data_0.pt").write_bytes(b"not a torch file")
    report = _run(demo.draft, samples, target=demo.target)
    ident = report.to_dict()["slot_identity"]
    assert ident["decided_by"] == "the target" and ident["target"]["samples"] == [1, 2]
    assert report.finding("samples") is not None
