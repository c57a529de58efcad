"""The train/serve trace (`doctor --trace`, `inspector.doctor.trace`): planted faults in drafts
trained here are found at the stage where they act, with the norm ratio they cause."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from inspector.doctor.trace.paths import (
    ANY_STAGE,
    DTYPE,
    EMBEDDING_SCALE,
    NORM_FLAG,
    SHIFT,
    VOCAB_MAP,
    Difference,
    trained_path,
    with_dtype,
    with_shift,
    with_vocab_map,
)
from inspector.doctor.trace.stage_compare import (
    IDS,
    PathTrace,
    StageDiff,
    stage_depth,
    stage_diff,
    trace,
    unit_roundoff,
)
from inspector.engines import Engine

pytestmark = pytest.mark.usefixtures("one_thread")


# -- the comparison's arithmetic ----------------------------------------------------------------


def test_stage_diff_reads_a_scale_as_a_norm_ratio_where_the_cosine_cannot():
    a = torch.randn(5, 16)
    d = stage_diff("embed", a, 8 * a, tol=1e-3)
    assert d.ratio == pytest.approx(8.0, rel=1e-6)
    assert d.rel == pytest.approx(7.0, rel=1e-6)
    assert d.cosine == pytest.approx(1.0, abs=1e-6)
    assert d.norm_served == pytest.approx(8 * d.norm_trained, rel=1e-6)
    assert d.parted
    same = stage_diff("embed", a, a.clone(), tol=0.0)
    assert same.rel == 0.0 and same.ratio == 1.0 and not same.parted


def test_a_stage_parts_only_beyond_its_tolerance_and_nan_parts():
    assert not StageDiff("fc", 1, 1, 1, 0.01, 1, 0.01).parted
    assert StageDiff("fc", 1, 1, 1, 0.0101, 1, 0.01).parted
    assert StageDiff("fc", 1, 1, 1, float("nan"), 1, 0.01).parted
    shapes = stage_diff("fc", torch.ones(2, 3), torch.ones(2, 4), tol=1.0)
    assert shapes.parted and math.isnan(shapes.ratio)


def test_the_tolerance_grows_with_depth_and_the_coarser_dtype():
    assert stage_depth("embed", 3) == -1 and stage_depth("fc", 3) == -1
    assert stage_depth("layer0.residual", 3) == 0 and stage_depth("layer2.out", 3) == 2
    assert stage_depth("norm", 3) == 3 and stage_depth("logits", 3) == 3
    assert unit_roundoff(torch.float32) == 2.0**-24
    assert unit_roundoff(torch.float32, torch.bfloat16) == 2.0**-8
    assert unit_roundoff(torch.float16, torch.float32) == 2.0**-11


def _path(stages: list[tuple[str, bool]], diffs: tuple[Difference, ...]) -> PathTrace:
    rows = tuple(StageDiff(s, 1, 1, 1, 1.0 if p else 0.0, 1, 0.5) for s, p in stages)
    return PathTrace("engine", diffs, rows, 0.5, 0.5, 0.4, 10)


def test_causes_are_those_acting_at_the_first_parting_then_earlier_then_everywhere():
    flag = Difference(NORM_FLAG, "x", "layer0.residual")
    scale = Difference(EMBEDDING_SCALE, "y", "embed")
    dtype = Difference(DTYPE, "z", ANY_STAGE)
    order = ["fc", "embed", "layer0.residual", "layer0.out"]
    at_residual = _path(
        [(s, s in ("layer0.residual", "layer0.out")) for s in order], (flag, scale, dtype)
    )
    assert at_residual.first_parted.stage == "layer0.residual"
    assert at_residual.causes == (flag,)
    later = _path([(s, s == "layer0.out") for s in order], (scale, dtype))
    assert later.causes == (scale,)  # acted within rounding at embed, grew by layer0.out
    only_dtype = _path([(s, s == "layer0.out") for s in order], (dtype,))
    assert only_dtype.causes == (dtype,)
    unknown = _path([(s, s == "layer0.out") for s in order], ())
    assert unknown.causes == ()
    clean = _path([(s, False) for s in order], (dtype,))
    assert clean.first_parted is None and clean.causes == ()


def test_the_ids_part_only_through_a_vocabulary_map():
    vmap = Difference(VOCAB_MAP, "m", IDS)
    stages = [("fc", False), ("logits", False), (IDS, True)]
    assert _path(stages, ()).first_parted is None  # a flipped near tie is not a parting
    mapped = _path(stages, (vmap,))
    assert mapped.first_parted.stage == IDS and mapped.causes == (vmap,)


# -- planted in drafts trained here -------------------------------------------------------------


def _evaluator(checkpoint: Path, samples: Path, target: Path):
    from inspector.session import Inputs, load_evaluator

    return load_evaluator(Inputs(checkpoint, [str(samples)], target), device="cpu")


def test_the_demo_draft_traces_clean_against_itself_and_in_bfloat16_within_rounding(demo):
    from inspector.wiring import Wiring

    ev = _evaluator(demo.draft, demo.train_samples, demo.target)
    base = trained_path(ev.draft, Wiring((0, 1, 2)), "test")
    bf16 = with_dtype(base, torch.bfloat16, "test")
    assert [d.cause for d in bf16.differences] == [DTYPE]
    t = trace(base, [base, bf16], ev.samples[0], rows=48)
    same, rounded = t.paths
    assert all(s.rel == 0.0 for s in same.stages) and same.agreement == 1.0
    assert same.first_parted is None
    assert rounded.first_parted is None
    assert all(0 < s.rel <= s.tol for s in rounded.stages if s.stage != IDS)
    assert t.rows == 48 and same.rows == 48


def test_a_planted_shift_and_map_part_where_they_act(demo):
    from inspector.wiring import Wiring

    ev = _evaluator(demo.draft, demo.train_samples, demo.target)
    base = trained_path(ev.draft, Wiring((0, 1, 2)), "test")
    shifted = with_shift(base, 0, "planted")
    mapped = with_vocab_map(base, torch.roll(ev.draft.vocab.d2t, 1) + 1, "planted")
    t = trace(base, [shifted, mapped], ev.samples[0], rows=32)
    s, m = t.paths
    assert s.first_parted.stage == "embed" and [c.cause for c in s.causes] == [SHIFT]
    assert m.first_parted.stage == IDS and [c.cause for c in m.causes] == [VOCAB_MAP]
    assert m.agreement < 1.0
    ids = next(x for x in m.stages if x.stage == IDS)
    assert ids.rel == pytest.approx(1 - m.agreement)  # the rows whose ids differ
    assert math.isnan(ids.ratio) and math.isnan(ids.cosine)  # ids have no norm
    assert ids.to_dict()["norm_ratio"] is None and ids.to_dict()["cosine"] is None


def test_sglang_ignoring_norm_before_residual_parts_at_the_first_residual(heldout_drafts):
    """A draft trained with norm_before_residual = true: SGLang reads the flag nowhere, vLLM
    reads it; the trace finds SGLang's path parting at layer 0's residual, with its ratio."""
    from inspector.doctor.trace.build import eagle3_trace
    from inspector.wiring import Wiring

    d = heldout_drafts["demo-nbr"]
    ev = _evaluator(d.checkpoint, d.samples, d.target)
    assert ev.draft.config.norm_before_residual
    t = eagle3_trace(
        ev.draft,
        ev.samples[0],
        ev.slot_info,
        Wiring(d.trained_wiring),
        engines=[Engine.VLLM, Engine.SGLANG],
        num_layers=6,
    )
    vllm, sglang = t.paths
    assert vllm.first_parted is None and vllm.agreement == 1.0
    first = sglang.first_parted
    assert first is not None and first.stage == "layer0.residual"
    assert [c.cause for c in sglang.causes] == [NORM_FLAG]
    assert "norm_before_residual = false" in sglang.causes[0].words
    # the residual is hidden_norm(h) as trained and h as served: its norm ratio is theirs
    assert first.ratio != pytest.approx(1.0, abs=0.02)
    assert all(
        not s.parted for s in sglang.stages[: [x.stage for x in sglang.stages].index(first.stage)]
    )
    assert sglang.agreement < 1.0


@pytest.fixture(scope="module")
def scaled_block_draft(demo, tmp_path_factory):
    """A DFlash draft trained with input_embedding_scale 8 on the demo target (a short run:
    the trace compares computations, not how well it drafts)."""
    from inspector.demo.block_draft import (
        TRAINED_IDS,
        BlockPlan,
        load_target,
        recapture,
        train_block_draft,
    )

    root = tmp_path_factory.mktemp("scaled-block")
    samples = recapture(load_target(demo.target), demo.train_samples, root / "samples", limit=8)
    plan = BlockPlan(steps=40, input_embedding_scale=8.0)
    draft = train_block_draft(root / "draft", samples, demo.target, TRAINED_IDS, plan)
    return draft, samples


def test_engines_that_ignore_input_embedding_scale_part_at_the_embedding(demo, scaled_block_draft):
    from inspector.doctor.trace.build import block_trace
    from inspector.formats import SampleSet
    from inspector.formats.block_draft import load_block_draft
    from inspector.wiring import layers_wiring

    folder, samples = scaled_block_draft
    draft = load_block_draft(folder, target=demo.target)
    block = draft.config.block
    assert block.input_embedding_scale == 8.0
    sample_set = SampleSet([str(samples)], vocab_size=draft.config.vocab_size)
    sample = sample_set[0]
    infos = sample.slot_info
    config = json.loads((folder / "config.json").read_text())
    t = block_trace(
        draft, sample, infos, layers_wiring(block.hf_layer_ids, infos), config, 6, rows=16
    )
    by_engine = {p.label.split()[0]: p for p in t.paths}
    for name in ("vLLM", "SGLang"):
        p = by_engine[name]
        first = p.first_parted
        assert first is not None and first.stage == "embed", name
        assert first.ratio == pytest.approx(1 / 8, rel=1e-4), name
        assert [c.cause for c in p.causes] == [EMBEDDING_SCALE], name
        assert "input_embedding_scale 8" in p.causes[0].words
    # a numerics fault the path does not model is said beside it, for its engine alone
    assert any("layer 0's k_norm" in k for k in by_engine["vLLM"].known)
    assert by_engine["SGLang"].known == ()
    from inspector.doctor.trace.finding import TraceFacts

    lines = TraceFacts(t).lines()
    assert any(x.startswith("vLLM 0.32, known and not modelled here: vLLM's CPU") for x in lines)


def test_a_dflash2_config_scale_is_what_vllm_reads():
    from inspector.engines import engine

    assert engine(Engine.VLLM).block_embedding_scale("dflash2", 8.0) == (
        8.0,
        "reads input_embedding_scale",
    )
    assert engine(Engine.VLLM).block_embedding_scale("dflash", 8.0)[0] == 1.0
    assert engine(Engine.SGLANG).block_embedding_scale("dflash2", 8.0)[0] == 1.0
    assert engine(Engine.LLAMACPP).block_embedding_scale("dflash", 8.0) is None


def test_doctor_trace_json_on_the_demo(demo, capsys):
    from inspector.cli import main

    rc = main(["doctor", "--trace", "1", "--json", "--samples", "2", "--engine", "vllm"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    (f,) = [f for f in out["findings"] if f["kind"] == "trace"]
    ev = f["evidence"]
    assert ev["sample"] == 1 and len(ev["paths"]) == 1
    assert ev["paths"][0]["first_parted"] is None
    assert ev["paths"][0]["stages"][0]["stage"] == "fc"


def test_doctor_trace_of_a_sample_not_read_is_one_line(demo, capsys):
    from inspector.cli import main

    rc = main(["doctor", "--trace", "999", "--samples", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "sample 999 is not in the set (48 samples: 0..47)" in err
    assert "--trace" in err


def test_doctor_trace_on_a_block_draft_names_the_scale(demo, scaled_block_draft, capsys):
    from inspector.cli import main

    folder, samples = scaled_block_draft
    args = ["doctor", str(folder), str(samples), "--target", str(demo.target)]
    rc = main([*args, "--trace", "--json", "--samples", "2", "--engine", "sglang"])
    out = json.loads(capsys.readouterr().out)
    (f,) = [f for f in out["findings"] if f["kind"] == "trace"]
    assert f["severity"] in ("warning", "error") and rc == 1
    (p,) = f["evidence"]["paths"]
    assert p["first_parted"] == "embed" and p["causes"] == ["embedding scale"]
    assert p["stages"][1]["norm_ratio"] == pytest.approx(0.125, rel=1e-4)
    assert "parts at embed, norm ratio 0.125" in f["summary"]


def test_the_rows_traced_keep_the_logits_within_their_bytes(demo):
    from inspector.doctor.trace.run import LOGIT_BYTES, block_anchors, eagle3_rows
    from inspector.formats import SampleSet

    sample = SampleSet([str(demo.train_samples)])[0]
    assert eagle3_rows(sample, 64) == 64
    per_row = LOGIT_BYTES // (4 * (1 << 20))  # rows of 2^20 float32 logits within the bytes
    assert eagle3_rows(sample, 64, 1, 1 << 20) == per_row == 16
    assert eagle3_rows(sample, 64, 1, 1 << 30) == 1
    assert eagle3_rows(sample, 10**6) == sample.length - 1
    assert len(block_anchors(sample, 64)) == 64
    assert len(block_anchors(sample, 64, 5, 1 << 20)) == per_row // 4  # 4 drafted rows a block
    anchors = block_anchors(sample, 8)
    assert anchors == sorted(anchors) and len(set(anchors)) == 8


def test_a_parting_the_dtype_alone_explains_is_a_lead_not_an_error():
    from inspector.doctor.trace.finding import trace_finding
    from inspector.doctor.trace.stage_compare import Trace

    dtype = Difference(DTYPE, "computes in bfloat16", ANY_STAGE)
    flag = Difference(NORM_FLAG, "runs norm_before_residual = false", "layer0.residual")
    stages = [("fc", False), ("layer0.residual", True)]
    only_dtype = _path(stages, (dtype,))  # agreement 0.5: an error were it not the dtype alone
    f = trace_finding(Trace("trainer", 0, 10, [only_dtype]))
    assert f.severity == "warning" and "float32" in f.fix
    f = trace_finding(Trace("trainer", 0, 10, [_path(stages, (dtype, flag))]))
    assert f.severity == "error" and "norm_before_residual" in f.summary


def test_an_engine_that_cannot_load_the_layout_says_so_on_its_path(demo):
    """SGLang reads no speculators config: its path is the draft once rewritten for it, and
    the line says so instead of passing as clean."""
    from inspector.doctor.trace.build import eagle3_trace
    from inspector.doctor.trace.finding import path_line
    from inspector.wiring import Wiring

    ev = _evaluator(demo.draft, demo.train_samples, demo.target)
    t = eagle3_trace(
        ev.draft,
        ev.samples[0],
        ev.slot_info,
        Wiring((0, 1, 2)),
        engines=[Engine.SGLANG],
        num_layers=6,
        rows=16,
    )
    (p,) = t.paths
    assert p.note is not None and "speculators" in p.note
    assert f"({p.note}; traced over the trained wiring)" in path_line(p)


def test_block_readings_take_the_fc_blocks_not_the_draft_layers(demo, scaled_block_draft):
    """A reader's 'N states for an fc that takes M' counts fc's inputs: a draft with fewer
    layers than target ids is read by its fc blocks."""
    from inspector.doctor.trace.paths import block_engine_paths
    from inspector.formats import SampleSet
    from inspector.formats.block_draft import load_block_draft
    from inspector.wiring import layers_wiring

    folder, samples = scaled_block_draft
    draft = load_block_draft(folder, target=demo.target)
    block = draft.config.block
    fewer = replace(draft, config=replace(draft.config, num_layers=2))
    assert fewer.config.num_fc_blocks == len(block.layer_ids) == 3
    infos = SampleSet([str(samples)])[0].slot_info
    base = trained_path(fewer, layers_wiring(block.hf_layer_ids, infos), "test")
    config = json.loads((folder / "config.json").read_text())
    for p in block_engine_paths(base, config, 6, infos):
        assert "fc that takes" not in (p.note or ""), (p.label, p.note)  # 3 ids, 3 fc blocks
        assert p.wiring.slots == base.wiring.slots, p.label  # the trained ids, read as written
