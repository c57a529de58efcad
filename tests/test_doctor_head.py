"""A draft that ships no lm_head.weight: the doctor says what each engine loads and, with the
target, scores the draft with the target's head rows for the draft vocab instead of stopping
with `tensor not found`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import edited_copy, error_lines

from inspector.cli import main
from inspector.doctor.checks.lm_head import borrow_target_head, head_finding, head_status
from inspector.errors import InputError


def _headless(demo, folder: Path, **config) -> Path:
    d = edited_copy(demo.draft, folder, config=lambda c: c.update(config))
    w = load_file(str(d / "model.safetensors"))
    w.pop("lm_head.weight")
    save_file(w, str(d / "model.safetensors"))
    return d


@pytest.fixture(scope="module")
def headless(demo, tmp_path_factory) -> Path:
    return _headless(demo, tmp_path_factory.mktemp("headless") / "draft")


def test_status(demo, headless, tmp_path):
    s = head_status(headless)
    assert (s.present, s.tied, s.reuse_target, s.draft_vocab_size, s.vocab_size) == (
        False,
        False,
        False,
        256,
        512,
    )
    assert s.sglang_random and s.has_d2t and s.has_embedding
    assert head_status(demo.draft).present
    assert not head_status(demo.draft).sglang_random
    tied = head_status(_headless(demo, tmp_path / "tied", tie_word_embeddings=True))
    assert tied.tied and not tied.sglang_random
    no_dvs = _headless(demo, tmp_path / "nodvs")
    cfg = json.loads((no_dvs / "config.json").read_text())
    del cfg["draft_vocab_size"]
    (no_dvs / "config.json").write_text(json.dumps(cfg))
    s = head_status(no_dvs)
    assert s.draft_vocab_size is None and not s.sglang_random
    assert head_status(tmp_path / "nowhere") is None


def test_words_per_engine(demo, headless, tmp_path):
    f = head_finding(head_status(headless))
    assert f.kind == "lm_head" and f.severity == "error"
    assert "no lm_head.weight (draft_vocab_size 256, tie_word_embeddings false)" in f.summary
    assert "SGLang keeps a randomly initialised head" in f.summary and "sglang#27908" in f.summary
    assert "vLLM shares the target's lm_head" in f.summary
    assert "--target DIR" in f.fix
    assert f.evidence["draft_vocab_size"] == 256 and f.evidence["scored_with_head_from"] is None
    tied = head_finding(head_status(_headless(demo, tmp_path / "t", tie_word_embeddings=True)))
    assert tied.severity == "warning" and "tie it to the embedding" in tied.summary
    same = head_finding(head_status(_headless(demo, tmp_path / "s", draft_vocab_size=512)), "T")
    assert "removing draft_vocab_size, which equals vocab_size" in same.fix
    assert "scores the draft with the target's lm_head rows" in same.summary


def test_borrowed_rows_follow_d2t(demo, headless, tmp_path):
    from inspector.formats.target_tensors import read_target_head

    out = borrow_target_head(head_status(headless), demo.target, tmp_path / "b")
    w = load_file(str(out / "model.safetensors"))
    full = read_target_head(demo.target).lm_head
    d2t = w["d2t"].long()
    assert torch.equal(w["lm_head.weight"], full[torch.arange(256) + d2t])
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (headless / "config.json").read_text()
    )


def test_doctor_without_the_target_names_the_missing_tensor(headless, capsys):
    rc = main(["doctor", str(headless), *_samples(), "--samples", "2", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert [(f["kind"], f["severity"]) for f in d["findings"]] == [("lm_head", "error")]
    assert d["checkpoint"] == str(headless) and d["wirings"] == []
    (head,) = d["findings"]
    assert head["summary"].endswith(". The other checks need a head to score the draft: none ran")
    assert head["fix"] == (
        "pass --target DIR (the doctor then scores the draft with the target's head), or "
        "ship the draft's own lm_head.weight [draft_vocab_size, hidden_size]"
    )
    rc = main(["doctor", str(headless), *_samples(), "--samples", "2"])
    out = capsys.readouterr().out
    assert rc == 1 and "lm_head" in out and "wirings by" not in out


def test_doctor_with_the_target_scores_the_borrowed_head(demo, headless, capsys):
    rc = main(
        [
            "doctor",
            str(headless),
            *_samples(),
            "--samples",
            "2",
            "--json",
            "--target",
            str(demo.target),
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert rc == 1  # SGLang would serve a random head
    kinds = {f["kind"]: f for f in d["findings"]}
    assert kinds["lm_head"]["severity"] == "error"
    assert kinds["lm_head"]["evidence"]["scored_with_head_from"] == str(demo.target)
    assert d["checkpoint"] == str(headless)
    assert d["best_wiring"] == [0, 1, 2] and d["wirings"][0]["all_tok"]["acc"] > 0.3
    assert d["serving_config"]["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]


def test_write_fixed_refuses_a_headless_draft(demo, headless, tmp_path, capsys):
    args = [str(headless), *_samples(), "--target", str(demo.target)]
    assert main(["doctor", *args, "--write-fixed", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "lm_head.weight" in err and len(error_lines(err)) == 1


def _samples() -> list[str]:
    from inspector.demo_paths import demo_paths

    return [str(demo_paths().train_samples)]


def test_own_head_against_the_targets(demo, capsys):
    """The demo draft trained its own head: the target's rows score clearly lower, which is what
    vLLM served before vllm#28549."""
    rc = main(["doctor", "--samples", "2", "--json"])  # the demo, with its target
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    (f,) = [x for x in d["findings"] if x["kind"] == "lm_head"]
    assert f["severity"] == "info" and "vllm#28549" in f["summary"]
    e = f["evidence"]
    assert e["own_clearly_better"] is True and e["target_clearly_better"] is False
    assert e["own_head"]["acc"] > e["target_head"]["acc"]


def test_a_draft_shipping_the_targets_rows_is_told(demo, headless, tmp_path, capsys):
    """A head that is not the one the draft was trained with: the borrowed rows score better."""
    from inspector.formats.target_tensors import read_target_head

    full = read_target_head(demo.target).lm_head
    w = load_file(str(demo.draft / "model.safetensors"))
    rows = full[torch.arange(256) + w["d2t"].long()]
    noisy = edited_copy(
        demo.draft,
        tmp_path / "noisy",
        tensors=lambda t: {"lm_head.weight": rows + 0.5 * torch.randn(rows.shape)},
    )
    rc = main(
        [
            "doctor",
            str(noisy),
            *_samples(),
            "--samples",
            "2",
            "--json",
            "--target",
            str(demo.target),
        ]
    )
    d = json.loads(capsys.readouterr().out)
    (f,) = [x for x in d["findings"] if x["kind"] == "lm_head"]
    assert rc in (0, 1) and f["severity"] == "warning"
    assert "trained with the target's head, not the one it ships" in f["summary"]


def test_no_comparison_with_a_head_of_another_width(demo):
    from inspector.doctor.checks.lm_head import compare_heads
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet, load_draft

    ev = Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))
    assert compare_heads(ev, [0], (0, 1, 2), torch.zeros(512, 64), "T") is None
    f = compare_heads(ev, [0], (0, 1, 2), torch.zeros(512, 128), "T")
    assert f is not None and f.evidence["target"] == "T"


def test_a_head_of_another_width_cannot_be_borrowed(demo, tmp_path):
    narrow = _headless(demo, tmp_path / "n")
    cfg = json.loads((narrow / "config.json").read_text())
    cfg["transformer_layer_config"]["hidden_size"] = 64
    (narrow / "config.json").write_text(json.dumps(cfg))
    status = head_status(narrow)
    assert status.hidden_size == 64
    with pytest.raises(InputError) as e:
        borrow_target_head(status, demo.target, tmp_path / "b")
    assert e.value.field == "lm_head.weight" and "128 wide" in str(e.value)
