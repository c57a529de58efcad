"""The serving replay on the draft families beyond the flat Llama layer: MLA attention, aux norms,
M-RoPE, sliding windows. Their TTT forward is parity-tested elsewhere; here the tree code (one
branch) must give every round the same accepted count as the chain read from the TTT steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from families import build
from support import edited_copy

from inspector.formats import load_draft
from inspector.serving.replay import Replayer
from inspector.serving.spec import DraftSpec
from inspector.session import Inputs, load_evaluator

SHARED_CONFIGS = Path(__file__).resolve().parents[1].parent / "shared" / "configs"
PR186 = "specforge-pr186-deepseek-r1-mla"  # both MLA layouts: test_replay_on_both_mla_layouts
STEMS = [
    "torchspec-kimi-k25-mla",
    "specforge-pr553-gemma3-27b",
    "specforge-qwen2.5-vl-7b",
]


pytestmark = pytest.mark.usefixtures("one_thread")


def _chain_equals_one_branch_tree(inputs: Inputs) -> None:
    ev3 = load_evaluator(inputs, device="cpu", dtype=torch.float64, ttt_steps=3)
    ev1 = load_evaluator(inputs, device="cpu", dtype=torch.float64, ttt_steps=1)
    chain, tree = Replayer(ev3, DraftSpec(3)), Replayer(ev1, DraftSpec(3))
    for w in ("train", "serve"):
        a = chain.a_by_start(0, ev3.wiring(w))
        b = tree.a_by_start(0, ev1.wiring(w))
        assert a.tolist() == b.tolist(), w
    wide = Replayer(ev1, DraftSpec(3, 2, 4)).run([ev1.wiring("train")]).wirings[0].stats
    assert wide.rounds > 0 and 1.0 <= wide.accept_length <= 4.0


@pytest.mark.parametrize("stem", STEMS)
def test_replay_on_published_families(stem, tmp_path):
    path = SHARED_CONFIGS / f"{stem}.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the published draft configs are not on this machine")
    ck = build(path, tmp_path, seq_len=20)
    _chain_equals_one_branch_tree(Inputs(ck.folder, [str(ck.samples)], embed=ck.embed))


@pytest.mark.parametrize("input_proj", [True, False], ids=["input-proj", "attention-on-2h"])
def test_replay_on_both_mla_layouts(input_proj, tmp_path):
    """SpecForge pull 186's MLA draft (input_proj 2H -> H, then MLA on H) and the later layout
    (MLA on the 2H concat) of the same config."""
    path = SHARED_CONFIGS / f"{PR186}.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the published draft configs are not on this machine")
    ck = build(path, tmp_path, seq_len=20, input_proj=input_proj)
    mla = load_draft(ck.folder, embed=ck.embed).config.mla
    assert mla is not None and mla.input_proj == input_proj
    _chain_equals_one_branch_tree(Inputs(ck.folder, [str(ck.samples)], embed=ck.embed))


def test_replay_on_a_sliding_window_draft(tiny_synthetic, tmp_path):
    def window(c: dict) -> None:
        c["transformer_layer_config"] |= {"layer_types": ["sliding_attention"], "sliding_window": 5}

    draft = edited_copy(tiny_synthetic[0], tmp_path / "d", config=window)
    _chain_equals_one_branch_tree(Inputs(draft, [str(tiny_synthetic[1])]))
