"""DSpark: its layouts (speculators' `speculators_model_type: "dspark"`, SpecForge's
`dflash_config.projector_type: "dspark"`) read into the canonical block draft, its logits (the
DFlash backbone plus the Markov bias) against the ones speculators' own DSpark code scored
(tests/golden_speculators_block, made by its make_golden.py with speculators 0.9.0), the
doctor's block-size rule, and the one-line refusal of the commands that run its blocks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import accumulation_tolerance

from inspector.errors import InputError
from inspector.formats import load_block_draft
from inspector.formats.block_config import block_draft_family
from inspector.model.block import (
    anchored_block_hidden,
    draft_rows,
    head_logits,
    markov_bias,
    markov_path,
)

ROOT = Path(__file__).parent / "golden_speculators_block"
TARGET = Path(__file__).parent / "golden_block" / "target"
ZLAB = Path(__file__).parent / "golden_block" / "dflash" / "checkpoint"
CASES = ("dspark_vanilla", "dspark_gated")

# speculators scores float32 logits (its flex attention, the Markov bias added in its own order):
# ours may differ by the float32 accumulation term of the error model
# (support.accumulation_tolerance, n = the hidden size, 64). Measured: at most 1.7e-6, against a
# tolerance of 1.5e-5 (a ninth).


@pytest.fixture(scope="module")
def inputs() -> dict[str, torch.Tensor]:
    return load_file(str(ROOT / "inputs.safetensors"))


@pytest.fixture(scope="module")
def expected() -> dict[str, torch.Tensor]:
    return load_file(str(ROOT / "expected.safetensors"))


def _blocks(draft, inputs, anchors):
    """(drafting rows [A, B, H], their logits, the true token before each draft [A, B]) of the
    blocks [x_a, mask, ...] at each anchor a."""
    block = draft.config.block
    ids = inputs["input_ids"]
    block_ids = torch.full((len(anchors), block.block_size), block.mask_token_id)
    block_ids[:, 0] = ids[anchors]
    normed = draft_rows(
        draft, anchored_block_hidden(draft, inputs["hidden_states"], anchors, block_ids)
    )
    n = block.drafts_per_block
    prev = ids[anchors[:, None] + torch.arange(n)[None, :]]  # draft j follows x_{a+j}
    return normed, head_logits(draft, normed), prev


@pytest.mark.parametrize("case", CASES)
def test_logits_match_speculators_dspark(inputs, expected, case):
    draft = load_block_draft(ROOT / case, target=TARGET)
    block = draft.config.block
    assert block is not None and block.family == "dspark" and draft.layout == "dspark (speculators)"
    # speculators' DSpark drafts from the anchor's row: block_size drafts a round
    assert block.anchor_drafts and block.drafts_per_block == block.block_size == 4
    assert block.markov_rank == 8 and block.markov_head_type == case.removeprefix("dspark_")
    assert block.confidence_input == 64 + 8  # hidden + the Markov row
    anchors = expected[f"{case}.anchors"]
    normed, logits, prev = _blocks(draft, inputs, anchors)
    got = logits + markov_bias(draft, prev, normed)
    exp = expected[f"{case}.logits"]
    tol = accumulation_tolerance(exp, draft.config.hidden_size)
    assert got.shape == exp.shape
    diff = (got - exp).abs().max().item()
    assert diff <= tol, (diff, tol)
    # the bias is what makes them speculators': without it they part
    assert (logits - exp).abs().max().item() > 100 * tol
    # the other slots (rows 1.. drafting, each one position later) part too: AL about 1 served so
    shifted = head_logits(draft, normed[:, 1:]) + markov_bias(draft, prev[:, 1:], normed[:, 1:])
    assert (shifted - exp[:, :-1]).abs().max().item() > 100 * tol


def test_greedy_path_is_the_teacher_forced_pick_while_it_matches(inputs, expected):
    """The sequential proposal's draft j is the teacher-forced argmax wherever drafts 0..j-1
    equal the true tokens: what the accepted prefix of a round counts."""
    draft = load_block_draft(ROOT / "dspark_gated", target=TARGET)
    anchors = expected["dspark_gated.anchors"]
    normed, logits, prev = _blocks(draft, inputs, anchors)
    path = markov_path(draft, normed, logits, prev[:, 0])
    forced = (logits + markov_bias(draft, prev, normed)).argmax(-1)
    truth = inputs["input_ids"][anchors[:, None] + 1 + torch.arange(4)[None, :]]
    matched = torch.ones(len(anchors), dtype=torch.bool)
    for j in range(4):
        assert torch.equal(path[matched, j], forced[matched, j])
        matched &= path[:, j] == truth[:, j]
    # and a path fed its own picks is a path: its first draft is the forced one everywhere
    assert torch.equal(path[:, 0], forced[:, 0])


def _specforge_dspark(tmp: Path, **dflash) -> Path:
    """z-lab's golden DFlash weights in SpecForge's DSpark layout (DSparkDraftModel, the keys in
    dflash_config), with a Markov head of rank 8."""
    folder = tmp / "specforge-dspark"
    shutil.copytree(ZLAB, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["DSparkDraftModel"]
    cfg["dflash_config"] |= {"projector_type": "dspark", "markov_rank": 8} | dflash
    (folder / "config.json").write_text(json.dumps(cfg))
    w = load_file(str(folder / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    w["markov_head.markov_w1.weight"] = torch.randn(256, 8, generator=gen)
    w["markov_head.markov_w2.weight"] = torch.randn(256, 8, generator=gen)
    save_file(w, str(folder / "model.safetensors"))
    return folder


def test_specforge_dspark_layout(tmp_path):
    """SpecForge trains its DSpark's B rows on x_{n+1}..x_{n+B} (`_build_dspark_labels_and_mask`):
    the anchor's row drafts, block_size drafts; `sample_from_anchor: false` says otherwise."""
    folder = _specforge_dspark(tmp_path)
    assert block_draft_family(folder) == "dspark"
    draft = load_block_draft(folder, target=TARGET)
    block = draft.config.block
    assert block is not None and draft.layout == "dspark (SpecForge)"
    assert block.anchor_drafts and block.drafts_per_block == block.block_size
    assert block.markov_rank == 8 and block.confidence_input is None
    assert block.marker == "dflash_config.projector_type"
    fill_in = _specforge_dspark(tmp_path / "fill-in", sample_from_anchor=False)
    block = load_block_draft(fill_in, target=TARGET).config.block
    assert block is not None and block.drafts_per_block == block.block_size - 1


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ({"markov_head_type": "rnn"}, "dflash_config.markov_head_type", "'rnn': not supported"),
        ({"markov_rank": -1}, "dflash_config.markov_rank", "non-negative"),
        (
            {"markov_rank": 0, "enable_confidence_head": True, "confidence_head_with_markov": True},
            "dflash_config.confidence_head_with_markov",
            "markov_rank is 0",
        ),
    ],
)
def test_malformed_dspark_keys_are_one_line(tmp_path, edit, field, words):
    folder = _specforge_dspark(tmp_path, **edit)
    with pytest.raises(InputError, match=words) as err:
        load_block_draft(folder, target=TARGET)
    assert err.value.field == field and "\n" not in str(err.value)


def test_missing_markov_tensor_is_named(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(ROOT / "dspark_vanilla", folder)
    w = load_file(str(folder / "model.safetensors"))
    del w["markov_head.markov_w2.weight"]
    save_file(w, str(folder / "model.safetensors"))
    with pytest.raises(InputError, match="markov_head.markov_w2.weight: tensor not found"):
        load_block_draft(folder, target=TARGET)


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    from inspector.cli import main

    capsys.readouterr()
    code = main([*argv, "--device", "cpu"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", ["accept --live"])
def test_commands_that_run_blocks_refuse_dspark_in_one_line(tmp_path, capsys, command):
    ckpt = str(ROOT / "dspark_vanilla")
    argv = [*command.split(), ckpt, str(ROOT), "--target", str(TARGET)]
    if command == "accept --live":
        prompts = tmp_path / "prompts.jsonl"
        prompts.write_text(json.dumps({"prompt": "hello"}) + "\n")
        argv = [*command.split(), ckpt, "--target", str(TARGET), "--prompts", str(prompts)]
    if command == "reconcile":
        log = Path(__file__).parents[1] / "assets" / "demo" / "engine-logs" / "vllm-deployed-k3.log"
        argv += ["--engine-log", str(log)]
    code, _, err = _run(capsys, argv)
    assert code == 2 and "Traceback" not in err
    assert "config.json: speculators_model_type: a DSpark draft" in err
    assert "the live loop (accept --live) does not run its Markov head yet" in err


def test_the_app_shows_dspark_blocks(tmp_path, inputs):
    """The app's figures (`BlockBrowser`) on a DSpark draft: every row of a block drafts, so a
    block shows block_size positions, and the set's totals are eval's."""
    from inspector.evaluate.block_eval import evaluate_blocks, load_block
    from inspector.evaluate.block_view import BlockBrowser
    from inspector.wiring import layers_wiring

    samples = _samples(tmp_path / "samples", inputs)
    draft, sample_set = load_block(
        str(ROOT / "dspark_gated"), [str(samples)], target=str(TARGET), dspark=True
    )
    browser = BlockBrowser(draft, sample_set, [0], cache_bytes=1 << 26)
    w = layers_wiring((2, 5, 7), sample_set[0].slot_info)
    browser.prepare(0, w)
    rows = browser.rows(0, w, 0)
    n = browser.anchors(0, w)[0]
    assert [r.position for r in rows] == [1, 2, 3, 4]
    assert [r.at for r in rows] == [n + 1, n + 2, n + 3, n + 4]
    totals = browser.totals(w)
    (ev,) = evaluate_blocks(draft, [(0, sample_set[0])], [(None, w)]).wirings
    assert len(totals.hits) == 4 and totals.accuracy == ev.accuracy


def test_doctor_holds_dspark_block_size_to_k(tmp_path, inputs, capsys):
    """Drafting from the anchor's row, a DSpark draft runs K rows: K must equal block_size; the
    engines' dated facts (vLLM #41834) say what another K did. The search scores its blocks
    as eval does, so the configured HF [2, 5, 7] is the wiring it reports on."""
    samples = _samples(tmp_path / "samples", inputs)
    ckpt = str(ROOT / "dspark_vanilla")
    base = ["doctor", ckpt, str(samples), "--target", str(TARGET), "--no-capture", "--json"]
    code, out, err = _run(capsys, [*base, "--steps", "7"])
    findings = {f["kind"]: f for f in json.loads(out)["findings"]}
    assert "wiring" in findings and "engine_feeds" in findings
    shape = findings["draft_shape"]
    assert shape["severity"] == "error" and shape["fix"] == "serve with num_speculative_tokens 4"
    assert "block_size 4 but num_speculative_tokens 7" in shape["summary"]
    assert "1.31 tokens a round at the model card's K = 7 and 2.74 at K = 5" in shape["summary"]
    assert "#41834" in shape["summary"]
    assert code == 1
    code, out, _ = _run(capsys, [*base, "--steps", "4"])
    findings = {f["kind"]: f for f in json.loads(out)["findings"]}
    assert findings["draft_shape"]["severity"] == "info"
    # the fill-in rule (K = block_size - 1) would call 3 right: this draft drafts from row 0
    code, out, _ = _run(capsys, [*base, "--steps", "3"])
    assert {f["kind"]: f for f in json.loads(out)["findings"]}["draft_shape"]["severity"] == "error"


def test_search_scores_dspark_blocks_as_eval_does(tmp_path, inputs):
    """The doctor's score of a wiring is the mean log p of the true tokens eval gives (the
    Markov bias on, every row drafting), and its accuracy eval's."""
    from inspector.doctor.wiring.block_search import BlockScorer
    from inspector.evaluate.block_eval import evaluate_blocks, load_block
    from inspector.wiring import layers_wiring

    samples = _samples(tmp_path / "samples", inputs)
    ckpt = str(ROOT / "dspark_gated")
    draft, sample_set = load_block(ckpt, [str(samples)], target=str(TARGET), dspark=True)
    sample = sample_set[0]
    scored = BlockScorer(draft, [sample]).score((2, 5, 7))
    w = layers_wiring((2, 5, 7), sample.slot_info)
    report = evaluate_blocks(draft, [(0, sample)], [(None, w)], positions=True)
    (rep,) = report.wirings
    assert scored.accuracy == pytest.approx(rep.mean_accuracy)
    logps = [
        torch.log(torch.tensor(p)).item()
        for r in rep.positions
        for p, ok in zip(r["p"], r["scored"], strict=True)
        if ok
    ]
    assert scored.logp == pytest.approx(sum(logps) / len(logps), abs=1e-4)


def test_doctor_on_a_fill_in_dspark_keeps_dflash_rule(tmp_path, inputs, capsys):
    """sample_from_anchor false: rows 1.. draft, K = block_size - 1, as DFlash."""
    folder = _specforge_dspark(tmp_path, sample_from_anchor=False)
    samples = _samples(tmp_path / "samples", inputs)
    base = ["doctor", str(folder), str(samples), "--target", str(TARGET), "--no-capture"]
    code, out, _ = _run(capsys, [*base, "--json", "--steps", "3"])
    shape = {f["kind"]: f for f in json.loads(out)["findings"]}["draft_shape"]
    assert shape["severity"] == "info" and "#41834" not in shape["summary"]


def test_doctor_traces_dspark(tmp_path, inputs, capsys):
    """--trace on a DSpark draft: its drafting rows, the Markov bias on, against each engine's
    path (none parts from the trained one on a config every reader reads alike)."""
    samples = _samples(tmp_path / "samples", inputs)
    argv = ["doctor", str(ROOT / "dspark_vanilla"), str(samples), "--target", str(TARGET)]
    code, out, err = _run(capsys, [*argv, "--no-capture", "--trace", "0", "--json"])
    assert "Traceback" not in err, err
    findings = {f["kind"]: f for f in json.loads(out)["findings"]}
    trace = next(f for k, f in findings.items() if "trace" in k)
    assert trace["evidence"]


def _samples(folder: Path, inputs: dict[str, torch.Tensor]) -> Path:
    """The golden sequence as one sample (the target's states at HF 2, 5, 7; rows 5.. generated)."""
    from inspector.demo.data import save_samples

    h = inputs["hidden_states"].view(inputs["hidden_states"].shape[0], 3, 64)
    loss_mask = torch.zeros_like(inputs["input_ids"])
    loss_mask[5:] = 1
    record = {
        "input_ids": inputs["input_ids"],
        "hidden_states": [h[:, i] for i in range(3)],
        "loss_mask": loss_mask,
    }
    save_samples(folder, [record], {}, layer_ids=[2, 5, 7], labels=["L2", "L5", "L7"])
    return folder


def test_eval_runs_dspark_slots_and_markov_head(tmp_path, inputs, capsys):
    """eval on a DSpark draft: block_size drafts a block (the anchor's row drafts), each draft's
    p is its logits plus the Markov bias of the true token before it, and the proposal is the
    greedy path: what the model functions give on the same sample."""
    from inspector.evaluate.block_eval import load_block

    ckpt = ROOT / "dspark_gated"
    samples = _samples(tmp_path / "samples", inputs)
    argv = ["eval", str(ckpt), str(samples), "--target", str(TARGET), "--positions", "--json"]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    report = json.loads(out)
    assert report["family"] == "dspark" and report["drafts"] == report["block_size"] == 4
    (w,) = report["wirings"]
    assert len(w["by_block_position"]) == 4
    draft, sample_set = load_block(str(ckpt), [str(samples)], target=str(TARGET), dspark=True)
    sample = sample_set[0]
    context = torch.cat(list(sample.slots), dim=-1)
    ids = sample.input_ids
    rows = w["positions"]
    anchors = torch.tensor([r["anchor"] for r in rows])
    block_ids = torch.full((len(anchors), 4), 250)
    block_ids[:, 0] = ids[anchors]
    normed = draft_rows(draft, anchored_block_hidden(draft, context, anchors, block_ids))
    logits = head_logits(draft, normed)
    where = (anchors[:, None] + torch.arange(1, 5)[None, :]).clamp(max=len(ids) - 1)
    forced = logits + markov_bias(draft, ids[where - 1], normed)
    p = torch.softmax(forced, dim=-1).gather(-1, ids[where][..., None])[..., 0]
    path = markov_path(draft, normed, logits, block_ids[:, 0])
    for j, r in enumerate(rows):
        assert r["pred"] == path[j].tolist()
        scored = torch.tensor(r["scored"])
        assert torch.allclose(torch.tensor(r["p"])[scored], p[j][scored], atol=1e-5)
        assert r["true"][: int(scored.sum())] == ids[where[j]][scored].tolist()


def test_accept_replays_dspark_rounds_of_k_drafts(tmp_path, inputs, capsys):
    """accept on a DSpark draft whose anchor's row drafts: K drafts a round are K rows (default
    block_size); its counts are eval's on the same blocks."""
    samples = _samples(tmp_path / "samples", inputs)
    ckpt = str(ROOT / "dspark_vanilla")
    common = [str(samples), "--target", str(TARGET), "--wiring", "train", "--json"]
    code, out, err = _run(capsys, ["accept", ckpt, *common])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["drafts_per_round"] == 4 and doc["block_size"] == 4
    code, ev, _ = _run(capsys, ["eval", ckpt, *common])
    (acc,), (evw,) = doc["wirings"], json.loads(ev)["wirings"]
    assert acc["accept_length"]["vllm"] == evw["accept_length"]["vllm"]
    code, out, err = _run(capsys, ["accept", ckpt, *common, "--steps", "3"])
    assert code == 0 and json.loads(out)["drafts_per_round"] == 3
    assert "each round runs a block of 3 rows (the anchor's first)" in err


def test_the_app_opens_on_a_dspark_draft(tmp_path, inputs):
    """The block app (Textual's pilot) on a DSpark draft: it loads, lists its wirings and
    shows block_size positions a block, with the accept length."""
    import asyncio
    import io

    from rich.console import Console

    from inspector.session import Inputs
    from inspector.tui.block_app import BlockApp

    samples = _samples(tmp_path / "samples", inputs)
    inp = Inputs(ROOT / "dspark_vanilla", [str(samples)], TARGET, None, None, False, None)

    async def run() -> None:
        app = BlockApp(inp, device="cpu")
        async with app.run_test(size=(160, 50)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.error is None and app.wirings is not None
            out = io.StringIO()
            console = Console(width=200, file=out, color_system=None)
            console.print(app.query_one("#block-accuracy").content)
            cells = [line.strip("│┃ ").split()[:1] for line in out.getvalue().splitlines()]
            positions = [c[0] for c in cells if c and c[0].isdigit()]
            assert positions == ["1", "2", "3", "4"]  # a row per block position
            assert "accept length" in out.getvalue()
            assert app.browser is not None
            assert app.browser.totals(app.shown).accept_length() is not None

    asyncio.run(run())


def test_reconcile_replays_dspark_blocks_of_k_rows(tmp_path, inputs, capsys):
    """reconcile on a DSpark draft replays the log's K drafts a round as K rows (the anchor's
    row drafts): a log of K = 3 gives blocks of 3 rows and 3 drafts a round."""
    samples = _samples(tmp_path / "samples", inputs)
    log = Path(__file__).parents[1] / "assets" / "demo" / "engine-logs" / "vllm-deployed-k3.log"
    argv = ["reconcile", str(ROOT / "dspark_vanilla"), str(samples), "--target", str(TARGET)]
    code, out, err = _run(capsys, [*argv, "--engine-log", str(log), "--json"])
    assert "replaying blocks of 3 rows" in err and "Traceback" not in err
    doc = json.loads(out)
    assert doc["config"]["steps"] == 3 and doc["config"]["family"] == "dspark"
