"""Our block forward against the logits the reference DFlash implementation wrote itself
(tests/golden_block, made by tests/golden_block/make_golden.py with `dflash` 0.1.0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import accumulation_tolerance

from inspector.formats import load_block_draft
from inspector.model.block import block_hidden, block_logits, head_logits, selector_path

ROOT = Path(__file__).parent / "golden_block"
TARGET = ROOT / "target"

# The reference's logits are float32 sums in its own order (k and v of the context and the block
# projected apart, SDPA over GQA-expanded keys): ours may differ by the float32 accumulation term
# of the error model (support.accumulation_tolerance, n = the hidden size, 64: 1.6e-5 on logits
# of RMS 1). Measured: 1.1e-6 (DFlash), 3.6e-7 (DFlash2), a fifteenth of it and less.


@pytest.fixture(scope="module")
def inputs() -> dict[str, torch.Tensor]:
    return load_file(str(ROOT / "inputs.safetensors"))


@pytest.fixture(scope="module")
def expected() -> dict[str, torch.Tensor]:
    return load_file(str(ROOT / "expected.safetensors"))


def _swa_checkpoint(tmp: Path) -> Path:
    """The DFlash fixture's weights under meta.json's sliding-window config edits."""
    meta = json.loads((ROOT / "meta.json").read_text())
    folder = tmp / "swa"
    shutil.copytree(ROOT / "dflash" / "checkpoint", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(meta["swa_overrides"])
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _top2_gap(logits: torch.Tensor) -> torch.Tensor:
    top2 = logits.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def _check(got: torch.Tensor, exp: torch.Tensor, hidden: int) -> float:
    assert got.shape == exp.shape and got.dtype == torch.float32
    tol = accumulation_tolerance(exp, hidden)
    diff = (got - exp).abs().max().item()
    assert diff <= tol, (diff, tol)
    # within tol of each other, two logits can swap order only if the reference's are 2 tol apart
    clear = _top2_gap(exp) > 2 * tol
    assert torch.equal(got.argmax(-1)[clear], exp.argmax(-1)[clear])
    return diff


@pytest.mark.parametrize("case", ["single", "cached", "swa"])
def test_dflash_logits_match_reference(tmp_path, inputs, expected, case):
    folder = _swa_checkpoint(tmp_path) if case == "swa" else ROOT / "dflash" / "checkpoint"
    draft = load_block_draft(folder, target=TARGET)
    block = draft.config.block
    assert block is not None and block.family == "dflash"
    if case == "swa":
        # the reference: a sliding layer is causal, a full one bidirectional (no is_causal set)
        assert block.causal == (True, False) and draft.config.sliding_windows == (5, None)
    else:
        assert block.causal == (False, False) and draft.config.sliding_windows == ()
    got = block_logits(draft, inputs[f"dflash.{case}.context"], inputs[f"dflash.{case}.block_ids"])
    _check(got, expected[f"dflash.{case}.logits"], draft.config.hidden_size)


def test_dflash_unbatched_is_the_batch_of_one(inputs):
    draft = load_block_draft(ROOT / "dflash" / "checkpoint", target=TARGET)
    ctx, ids = inputs["dflash.single.context"], inputs["dflash.single.block_ids"]
    assert torch.equal(block_logits(draft, ctx[0], ids[0]), block_logits(draft, ctx, ids)[0])


def test_dflash2_logits_and_proposal_match_reference(inputs, expected):
    draft = load_block_draft(ROOT / "dflash2" / "checkpoint", target=TARGET)
    block = draft.config.block
    assert block is not None and block.family == "dflash2"
    # is_causal false overrides the sliding layers' causality; the window stays
    assert block.causal == (False, False) and draft.config.sliding_windows == (6, 6)
    ctx, ids = inputs["dflash2.single.context"], inputs["dflash2.single.block_ids"]
    normed = block_hidden(draft, ctx, ids)[:, 1:]
    logits = head_logits(draft, normed)
    _check(logits, expected["dflash2.single.logits"], draft.config.hidden_size)
    assert torch.equal(block_logits(draft, ctx, ids), logits)
    path = selector_path(draft, normed, logits, ids[:, 0])
    assert torch.equal(path, expected["dflash2.single.proposal"])


def test_wiring_is_in_hf_hidden_states_indices():
    """The config's ids are decoder layers (the reference reads hidden_states[id + 1]): the
    canonical wiring, like every other draft's, is in HF hidden_states indices."""
    draft = load_block_draft(ROOT / "dflash" / "checkpoint", target=TARGET)
    block = draft.config.block
    assert block is not None
    assert block.layer_ids == (1, 4, 6) and block.hf_layer_ids == (2, 5, 7)
    assert draft.config.aux_layer_ids == (2, 5, 7) and draft.config.aux_layer_convention == "hf"
    assert draft.config.num_fc_blocks == 3


@pytest.mark.parametrize(
    "edit",
    [
        "the mask row",  # vLLM's mask_embedding.pt replaces the mask token's embedding
        "the window",  # a window wider than the sequence changes nothing
    ],
)
def test_changes_that_should_and_should_not_move_the_logits(tmp_path, inputs, edit):
    ctx, ids = inputs["dflash.single.context"], inputs["dflash.single.block_ids"]
    base = block_logits(load_block_draft(ROOT / "dflash" / "checkpoint", target=TARGET), ctx, ids)
    folder = tmp_path / "ckpt"
    shutil.copytree(ROOT / "dflash" / "checkpoint", folder)
    if edit == "the mask row":
        torch.save(
            {"embedding": torch.zeros(64), "mask_token_id": 250}, folder / "mask_embedding.pt"
        )
        draft = load_block_draft(folder, target=TARGET)
        assert any("mask_embedding.pt" in n for n in draft.notes)
        assert not torch.allclose(block_logits(draft, ctx, ids), base)
    else:
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(layer_types=["sliding_attention"] * 2, sliding_window=64, is_causal=False)
        (folder / "config.json").write_text(json.dumps(cfg))
        draft = load_block_draft(folder, target=TARGET)
        assert torch.allclose(block_logits(draft, ctx, ids), base, atol=1e-6, rtol=0)
