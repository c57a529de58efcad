"""eval and doctor on a block draft (DFlash): the blocks over samples, the trained layers found
from samples alone, each engine's reading of the config, the block size, the mask token.

The trained draft is `block_fixtures.block_bed` (ids TRAINED on the demo target, not the
reference's default spread); the forward pieces are checked against the golden drafts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from block_fixtures import TRAINED

from inspector.cli import main
from inspector.doctor.checks.block_checks import block_size_finding, mask_finding
from inspector.doctor.finding import Severity
from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.engines.sglang import dflash_guess
from inspector.formats import load_block_draft
from inspector.formats.block_config import build_target_layer_ids
from inspector.model.block import anchored_block_hidden, block_hidden

GOLDEN = Path(__file__).parent / "golden_block"
TRAINED_HF = [k + 1 for k in TRAINED]

pytestmark = pytest.mark.usefixtures("one_thread")


def cli_json(capsys, argv: list[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("family", ["dflash", "dflash2"])
@pytest.mark.parametrize("window", [None, 3])
def test_anchored_blocks_equal_one_block_at_a_time(family, window):
    """Many blocks over one sample's context at once give what each block gives alone (its
    own context rows only), sliding windows included."""
    draft = load_block_draft(GOLDEN / family / "checkpoint", target=GOLDEN / "target")
    if window is not None:
        n = draft.config.num_layers
        draft = replace(draft, config=replace(draft.config, sliding_windows=(window,) * n))
    cfg = draft.config
    b = cfg.block.block_size
    torch.manual_seed(0)
    context = torch.randn(20, cfg.num_fc_blocks * cfg.target_hidden_size)
    anchors = torch.tensor([1, 6, 19, 20])
    ids = torch.full((4, b), cfg.block.mask_token_id)
    ids[:, 0] = torch.tensor([3, 4, 5, 6])
    together = anchored_block_hidden(draft, context, anchors, ids)
    for i, n in enumerate(anchors.tolist()):
        alone = block_hidden(draft, context[:n], ids[i])
        torch.testing.assert_close(together[i], alone, atol=1e-5, rtol=1e-5)


def test_sglang_guess_is_the_reference_spread():
    assert dflash_guess(64, 5) == [1, 16, 31, 46, 61]
    for layers in range(4, 130):
        for n in range(1, 9):
            assert dflash_guess(layers, n) == build_target_layer_ids(layers, n)


def test_engine_readings_of_a_config_without_ids():
    cfg = {"num_hidden_layers": 5, "dflash_config": {"mask_token_id": 1}}
    reads = {r.reader.engine: r for r in engine_reads(cfg, 64, 5, draft="dflash")}
    sglang = reads["sglang"]
    assert sglang.fed == (2, 17, 32, 47, 62) and sglang.problem is None
    assert "its guess [1, 16, 31, 46, 61]" in sglang.notes[0]
    assert reads["vllm"].problem is not None  # its default triple: 3 states for 5 fc blocks
    with_ids = dict(cfg, dflash_config={"target_layer_ids": [5, 19, 33, 47, 61]})
    reads = {r.reader.engine: r for r in engine_reads(with_ids, 64, 5, draft="dflash")}
    assert reads["vllm"].fed == reads["sglang"].fed == (6, 20, 34, 48, 62)


def test_block_size_against_the_engines_k():
    draft = load_block_draft(GOLDEN / "dflash" / "checkpoint", target=GOLDEN / "target")
    block = draft.config.block  # block_size 4
    assert block_size_finding(block, 3).severity is Severity.INFO
    wrong = block_size_finding(block, 7)
    assert wrong.severity is Severity.WARNING
    assert "block_size 4" in wrong.summary and "num_speculative_tokens 7" in wrong.summary
    assert wrong.fix == "serve with num_speculative_tokens 3"


def test_mask_token_row():
    draft = load_block_draft(GOLDEN / "dflash" / "checkpoint", target=GOLDEN / "target")
    assert mask_finding(draft).severity is Severity.INFO
    embed = draft.weights["embed_tokens.weight"].clone()
    embed[draft.config.block.mask_token_id] = 0
    zeroed = replace(draft, weights={**draft.weights, "embed_tokens.weight": embed})
    found = mask_finding(zeroed)
    assert found.severity is Severity.ERROR and "zeros" in found.summary
    own = {**zeroed.weights, "mask_embedding": torch.ones(draft.config.hidden_size)}
    assert mask_finding(replace(zeroed, weights=own)).severity is Severity.INFO


def test_eval_reports_blocks_per_wiring(block_bed, capsys):
    code, report = cli_json(
        capsys,
        [
            "eval",
            str(block_bed.draft),
            str(block_bed.samples),
            "--target",
            str(block_bed.target),
            "--wiring",
            "train",
            "--wiring",
            "2,3,4",
            "--limit",
            "6",
            "--json",
            "--device",
            "cpu",
        ],
    )
    assert code == 0 and report["family"] == "dflash" and report["block_size"] == 4
    trained, spread = report["wirings"]
    assert trained["layers"] == TRAINED_HF and spread["layers"] == [2, 3, 4]
    assert len(trained["by_block_position"]) == 3
    assert trained["accuracy"] > spread["accuracy"] + 0.05
    tau = trained["accept_length"]["vllm"]["value"]
    assert tau > spread["accept_length"]["vllm"]["value"] and 1 < tau < 4
    # the first block position is the easiest: the target's states at the anchor's row
    acc = [p["accuracy"] for p in trained["by_block_position"]]
    assert acc[0] >= acc[-1]


def test_eval_table(block_bed, capsys):
    capsys.readouterr()
    argv = [
        "eval",
        str(block_bed.draft),
        str(block_bed.samples),
        "--target",
        str(block_bed.target),
        "--limit",
        "2",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "accept length (vLLM)" in out and "block position" in out


def test_doctor_finds_the_trained_ids_from_samples_alone(block_bed, capsys):
    """The config lost its ids: the reference and SGLang guess [1, 2, 3]; the doctor asks the
    weights and names the trained ids and the fix."""
    code, report = cli_json(
        capsys,
        [
            "doctor",
            str(block_bed.lost_ids),
            str(block_bed.samples),
            "--target",
            str(block_bed.target),
            "--json",
            "--device",
            "cpu",
        ],
    )
    assert code == 1
    findings = {f["kind"]: f for f in report["findings"]}
    wiring = findings["wiring"]
    assert wiring["severity"] == "error"
    assert wiring["evidence"]["trained_ids"] == list(TRAINED)
    assert wiring["fix"] == f"set dflash_config.target_layer_ids to {list(TRAINED)}"
    feeds = findings["engine_feeds"]
    assert feeds["severity"] == "error"
    readings = {r["reader"]: r for r in feeds["evidence"]["readings"]}
    sglang = next(r for k, r in readings.items() if k.startswith("SGLang"))
    assert sglang["fed"] == [2, 3, 4] and "guess [1, 2, 3]" in sglang["notes"][0]
    assert str(list(TRAINED)) in feeds["fix"]


def test_doctor_on_the_configured_draft(block_bed, capsys):
    code, report = cli_json(
        capsys,
        [
            "doctor",
            str(block_bed.draft),
            str(block_bed.samples),
            "--target",
            str(block_bed.target),
            "--json",
            "--device",
            "cpu",
        ],
    )
    findings = {f["kind"]: f for f in report["findings"]}
    assert findings["wiring"]["severity"] == "info"
    readings = {r["reader"]: r for r in findings["engine_feeds"]["evidence"]["readings"]}
    vllm = next(r for k, r in readings.items() if k.startswith("vLLM"))
    assert vllm["fed"] == TRAINED_HF and vllm["problem"] is None
    assert findings["vocab_map"]["severity"] == "info"


class _StubScorer:
    """A scorer whose best wiring is `truth` (score: how many fc blocks hold their trained layer,
    then how close the others are), to count what the search costs at a real model's size."""

    def __init__(self, truth: tuple[int, ...], held: tuple[int, ...]) -> None:
        from types import SimpleNamespace

        from inspector.doctor.wiring.block_search import Scored

        self.truth, self.held, self.cache = truth, held, {}
        self.draft = SimpleNamespace(config=SimpleNamespace(num_fc_blocks=len(truth)))
        self._scored = Scored

    def score(self, layers):
        layers = tuple(layers)
        if layers not in self.cache:
            right = sum(a == b for a, b in zip(layers, self.truth, strict=True))
            near = -sum(abs(a - b) for a, b in zip(layers, self.truth, strict=True))
            self.cache[layers] = self._scored(layers, right / len(layers), near)
        return self.cache[layers]


def test_search_scales_to_5_of_61_layers():
    """Qwen3.8-27B-DFlash2's trained layers among the 62 states of a 61-layer capture, found
    from the reference's default guess in a few sweeps of N x S wirings (not 62^5 orderings)."""
    from inspector.doctor.wiring.block_search import search_block_wiring

    truth = (6, 20, 34, 48, 62)  # ids [5, 19, 33, 47, 61] + 1
    scorer = _StubScorer(truth, tuple(range(63)))
    found = search_block_wiring(scorer, [("configured", (2, 17, 32, 47, 62))])
    assert found.best.layers == truth and found.trained_ids == (5, 19, 33, 47, 61)
    assert found.evaluated <= 5 * 63 * found.sweeps


def test_dflash2_blocks_are_its_selectors_path():
    """eval's prediction for a DFlash2 block is the selector's path over that block alone."""
    from inspector.evaluate.block_eval import predict_blocks
    from inspector.model.block import head_logits, selector_path
    from inspector.sample import Sample, SlotInfo
    from inspector.wiring import Wiring

    draft = load_block_draft(GOLDEN / "dflash2" / "checkpoint", target=GOLDEN / "target")
    cfg = draft.config
    n, t = cfg.num_fc_blocks, 12
    torch.manual_seed(1)
    slots = [torch.randn(t, cfg.target_hidden_size) for _ in range(n)]
    ids = torch.randint(0, cfg.vocab_size - 1, (t,))
    mask = torch.zeros(t, dtype=torch.long)
    mask[4:] = 1
    infos = [SlotInfo(f"L{k}", hf_index=k) for k in cfg.block.hf_layer_ids]
    sample = Sample(ids, slots, mask, infos)
    bp = predict_blocks(draft, sample, Wiring(tuple(range(n))))
    assert bp.anchors.tolist() == list(range(4, t - 1))
    context = torch.cat(slots, dim=-1)
    for j, a in enumerate(bp.anchors.tolist()):
        block = torch.full((cfg.block.block_size,), cfg.block.mask_token_id)
        block[0] = ids[a]
        normed = block_hidden(draft, context[:a], block)[None, 1:]
        path = selector_path(draft, normed, head_logits(draft, normed), ids[a : a + 1])
        assert bp.pred[j].tolist() == path[0].tolist()


def test_doctor_engine_flag_keeps_its_readings(block_bed, capsys):
    """--engine vllm: the readings of vLLM (and the reference) only; vLLM feeds the trained
    layers of the configured draft, so nothing is wrong (SGLang, which cannot tap the last
    layer's output, is left out)."""
    code, report = cli_json(
        capsys,
        [
            "doctor",
            str(block_bed.draft),
            str(block_bed.samples),
            "--target",
            str(block_bed.target),
            "--engine",
            "vllm",
            "--json",
            "--device",
            "cpu",
        ],
    )
    assert code == 0
    feeds = next(f for f in report["findings"] if f["kind"] == "engine_feeds")
    assert feeds["severity"] == "info"
    assert [r["reader"].split()[0] for r in feeds["evidence"]["readings"]] == ["dflash", "vLLM"]


def test_eval_refuses_train_on_samples_without_the_configured_layers(block_bed, demo, capsys):
    """The demo's own samples hold HF [0, 2, 4, 6]: `train` (HF [1, 4, 6]) is not there, and
    eval says so instead of feeding the first slots; named slots still run."""
    base = [
        "eval",
        str(block_bed.draft),
        str(demo.train_samples),
        "--target",
        str(block_bed.target),
        "--limit",
        "1",
        "--device",
        "cpu",
    ]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "not the configured layers HF [1]" in err and "capture --layers" in err
    assert main([*base, "--wiring", "0,2,3", "--json"]) == 0


def test_doctor_steps_against_the_block_size(block_bed, capsys):
    """--steps K (the engine's num_speculative_tokens): a block of 4 served with K 7 is a
    warning naming both, and the fix K 3."""
    code, report = cli_json(
        capsys,
        [
            "doctor",
            str(block_bed.draft),
            str(block_bed.samples),
            "--target",
            str(block_bed.target),
            "--engine",
            "vllm",
            "--steps",
            "7",
            "--json",
            "--device",
            "cpu",
        ],
    )
    shape = next(f for f in report["findings"] if f["kind"] == "draft_shape")
    assert shape["severity"] == "warning" and code == 0  # a warning: the exit status stays 0
    assert "block_size 4 but num_speculative_tokens 7" in shape["summary"]
    assert shape["evidence"] == {"block_size": 4, "num_speculative_tokens": 7}


def test_eval_positions_and_per_sample(block_bed, capsys):
    """--positions --json: every block's draft, truth, p and rank; --per-sample: a row a sample."""
    base = [
        "eval",
        str(block_bed.draft),
        str(block_bed.samples),
        "--target",
        str(block_bed.target),
        "--limit",
        "2",
        "--device",
        "cpu",
    ]
    code, report = cli_json(capsys, [*base, "--positions", "--json"])
    (w,) = report["wirings"]
    first = w["positions"][0]
    assert set(first) == {"sample", "anchor", "pred", "true", "p", "rank", "scored"}
    assert len(first["pred"]) == len(first["rank"]) == 3
    hit = [p == t for p, t in zip(first["pred"], first["true"], strict=True)]
    assert all(r == 0 for r, h in zip(first["rank"], hit, strict=True) if h)
    assert main([*base, "--per-sample"]) == 0
    assert "per sample" in capsys.readouterr().out


def test_doctor_on_samples_without_the_configured_layers(block_bed, demo, capsys):
    """The demo's own samples hold HF [0, 2, 4, 6], not the configured HF 1, and --no-capture
    keeps the search to them: the wiring is the best of what they hold, a warning, and so is
    each reader's feed judged against it."""
    code, report = cli_json(
        capsys,
        [
            "doctor",
            str(block_bed.draft),
            str(demo.train_samples),
            "--target",
            str(block_bed.target),
            "--engine",
            "vllm",
            "--no-capture",
            "--json",
            "--device",
            "cpu",
        ],
    )
    findings = {f["kind"]: f for f in report["findings"]}
    assert findings["wiring"]["severity"] == "warning"
    assert "do not hold the configured layers HF [1, 4, 6]" in findings["wiring"]["summary"]
    feeds = findings["engine_feeds"]
    assert feeds["severity"] == "info" and feeds["fix"] is None and code == 0
    assert feeds["evidence"]["trained"] is None


def test_doctor_captures_the_layers_the_samples_lack(block_bed, demo, capsys):
    """The demo's own samples hold HF [0, 2, 4, 6]; the draft whose config lost its ids was
    trained on HF [1, 4, 6]. With --target the doctor runs the target over its samples, keeps
    every layer, and the search names the trained layers, HF 1 from the capture."""
    code, report = cli_json(
        capsys,
        [
            "doctor",
            str(block_bed.lost_ids),
            str(demo.train_samples),
            "--target",
            str(block_bed.target),
            "--samples",
            "4",
            "--json",
            "--device",
            "cpu",
        ],
    )
    wiring = {f["kind"]: f for f in report["findings"]}["wiring"]
    assert code == 1 and wiring["severity"] == "error"
    evidence = wiring["evidence"]
    assert evidence["best"]["layers"] == TRAINED_HF
    assert evidence["trained_ids"] == list(TRAINED)
    assert evidence["held_layers"] == list(range(7))
    capture = evidence["capture"]
    assert capture["layers"] == [1, 3, 5] and capture["samples"] == 4
    assert "HF [1] captured from the target over 4 samples" in wiring["summary"]
    assert wiring["fix"] == f"set dflash_config.target_layer_ids to {list(TRAINED)}"


def test_capture_budget_keeps_fewer_samples_or_none(block_bed, demo):
    """Past the budget the capture keeps fewer samples, with a note; where one sample alone is
    past it, none: the search then runs on the held layers."""
    from inspector.doctor.wiring.block_capture import capture_every_layer
    from inspector.formats import SampleSet

    samples = [SampleSet([str(demo.train_samples)])[i] for i in range(3)]
    cpu = torch.device("cpu")
    per_row = 7 * 128 * 4  # HF 0..6, 128 wide, float32
    one = samples[0].length * per_row
    got, cap, notes = capture_every_layer(block_bed.target, samples, 4, cpu, budget=one)
    assert got is not None and cap is not None and cap.samples == 1 and cap.nbytes == one
    assert len(got[0].slots) == 7 and got[0].slots[1].shape == (samples[0].length, 128)
    assert "keeps 1 of the 3 samples" in notes[0]
    got, cap, notes = capture_every_layer(block_bed.target, samples, 4, cpu, budget=one - 1)
    assert got is None and cap is None and "MiB budget" in notes[0]
    # samples that hold every layer need no capture
    assert capture_every_layer(block_bed.target, [block_bed_sample(block_bed)], 4, cpu)[0] is None


def block_bed_sample(block_bed):
    from inspector.formats import SampleSet

    return SampleSet([str(block_bed.samples)])[0]


def test_the_block_demo_writes_a_new_folder_only(tmp_path):
    """`python -m inspector.demo block --out DIR` refuses a folder that holds anything, before
    any work (the README's case writes block-demo/)."""
    from inspector.demo.block_draft import build_block_demo
    from inspector.errors import InputError

    (tmp_path / "x").write_text("")
    with pytest.raises(InputError) as e:
        build_block_demo(tmp_path, Path("unused"))
    assert e.value.field == "out" and "not empty" in e.value.message
