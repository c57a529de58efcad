"""The trainers' own metrics: their row conventions on hand-made predictions, and the exact
figures speculators and SpecForge themselves log for the bundled demo draft."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from support import accumulation_tolerance

from inspector.metrics import Counts, simulated_acc_len, specforge_counts, speculators_counts

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo"
FIGURES = json.loads((Path(__file__).parent / "fixtures" / "trainer_metrics_demo.json").read_text())

# T = 6 tokens, the prompt is x_0, x_1; the verifier's argmax per position (target ids):
MASK = np.array([0, 0, 1, 1, 1, 1], bool)
V_IN = np.array([9, 10, 11, 12, 13, 14])  # within the draft vocab
V_FULL = np.array([9, 10, 11, 12, 500, 14])  # at position 4 the full argmax is outside it
# predictions of rows j = 0..T-2-k (the last row of each step predicts past the sample's end)
PREDS = [np.array([10, 11, 99, 13, 14]), np.array([11, 0, 13, 14]), np.array([12, 13, 14])]


def test_speculators_chain_breaks_and_counts_the_row_after_the_end():
    (f0, c0), (f1, c1), (f2, c2) = speculators_counts(PREDS, V_IN, MASK)
    # step 0: rows 1..4 counted (l_{j+1}); row 2 misses; the tail row 4 hits
    assert (f0, c0) == (Counts(3, 4), Counts(3, 4))
    # step 1: only row 3 (the tail row of step 1) kept its chain: row 1 broke at step 1
    assert (f1, c1) == (Counts(1, 4), Counts(1, 2))
    # step 2: every prediction matches, but no chain survived step 1
    assert (f2, c2) == (Counts(0, 3), Counts(0, 0))


def test_specforge_per_step_full_vocab_target_unshifted_mask():
    acc = specforge_counts(PREDS, V_FULL, MASK)
    # step 0 counts rows 2..4 (l_j): row 3's teacher token is outside the draft vocab: a miss
    # step 1 counts rows 1..3 (l_{j+1}); step 2 rows 0..2; no chain: row 2 of step 2 hits again
    assert acc == [Counts(1, 3), Counts(1, 3), Counts(2, 3)]
    assert simulated_acc_len([c.acc for c in acc]) == pytest.approx(1 / 3 + 1 / 9 + 2 / 27)
    assert simulated_acc_len([]) is None and simulated_acc_len([0.5, None]) is None


def test_specforge_forces_the_last_mask_entry_off():
    """A response that runs to the sample's end: SpecForge never counts the row whose mask index
    is T-1, while speculators counts it (its target is the verifier's prediction past the end)."""
    mask = np.array([0, 1, 1, 1], bool)
    v = np.array([5, 6, 7, 8])
    preds = [np.array([6, 7, 8])]  # rows 0..2, all matching
    assert specforge_counts(preds, v, mask) == [Counts(2, 2)]  # rows 1, 2 (l_j; l_3 forced 0)
    assert speculators_counts(preds, v, mask)[0][0] == Counts(3, 3)  # rows 0..2 (l_{j+1})


def test_row_counts_are_checked():
    with pytest.raises(ValueError, match="T-1-k"):
        speculators_counts([np.array([1, 2])], V_IN, MASK)


def test_demo_figures_are_the_demo_files_figures():
    digest = hashlib.sha256((DEMO / "draft" / "model.safetensors").read_bytes()).hexdigest()
    ((key, prefix),) = FIGURES["for_files"].items()
    assert digest.startswith(prefix), (
        "the demo draft changed: recompute tests/fixtures/trainer_metrics_demo.json with the "
        "trainers themselves (see its 'about')"
    )


# The trainers' figures come from their own float32 code: our logits and theirs may differ by the
# error model's accumulation term (support.accumulation_tolerance), so a row whose top two logits lie
# within twice that of each other may pick the other token in their code. Such rows (a handful of
# 5469: the demo has exact ties) may move a count by one each; every other row must agree, so the
# counts agree up to that number. Totals come from the loss masks alone and are exact.
def _near_ties(logits: torch.Tensor, n: int) -> int:
    top2 = logits.topk(2, dim=-1).values
    return int(((top2[:, 0] - top2[:, 1]) <= 2 * accumulation_tolerance(logits, n)).sum())


@pytest.fixture(scope="module")
def demo_reports():
    from inspector.model import fc_input, fc_project, forward_steps
    from inspector.session import Inputs, load_evaluator

    out = {}
    for split in ("train", "held"):
        inputs = Inputs(
            DEMO / "draft", [str(DEMO / "samples" / split)], DEMO / "target", None, None, True
        )
        ev = load_evaluator(inputs, device="cpu", ttt_steps=3)
        wirings = [ev.wiring("0,1,2"), ev.wiring("1,2,3")]
        report = ev.run(wirings)
        draft, head = ev.draft, ev.target_head
        ties = dict.fromkeys((w.key() for w in wirings), 0)
        with torch.no_grad():
            for i in range(len(ev.samples)):
                s = ev.samples[i]
                slots = [x.float() for x in s.slots]
                teacher = head.logits(head.normed(slots[3]))
                v = _near_ties(teacher, head.lm_head.shape[1])
                for w in wirings:
                    h = fc_project(draft, fc_input(draft, [slots[j] for j in w.slots]))[:-1]
                    lg = forward_steps(draft, h, s.input_ids[1:], steps=3, position_offset=1)
                    ties[w.key()] += v + sum(_near_ties(x, draft.config.hidden_size) for x in lg)
                ev.release(i)
        out[split] = {w.wiring.key(): (w, ties[w.wiring.key()]) for w in report.wirings}
    return out


@pytest.mark.parametrize("split", ["train", "held"])
@pytest.mark.parametrize("wiring", ["0,1,2", "1,2,3"])
def test_reproduces_the_trainers_logged_figures_on_the_demo(demo_reports, split, wiring):
    w, ties = demo_reports[split][wiring]
    assert ties < 50  # near ties are rare: the allowance leaves the counts meaningful
    spec = FIGURES["speculators"][split][wiring]
    forge = FIGURES["specforge"][split][wiring]

    def close(ours: list, theirs: list) -> bool:
        return all(
            a[1] == b[1] and abs(a[0] - b[0]) <= ties for a, b in zip(ours, theirs, strict=True)
        )

    assert close([[s.spec_full.hits, s.spec_full.total] for s in w.steps], spec["full_acc"])
    assert close([[s.spec_cond.hits, 0] for s in w.steps], [[h, 0] for h in spec["cond_acc_hits"]])
    assert close([[s.specforge.hits, s.specforge.total] for s in w.steps], forge["acc"])
    # sum_k prod_{m<=k} acc_m moves by at most sum_k (k+1) * ties / total, plus the logged rounding
    total = forge["acc"][0][1]
    slack = 1e-6 + sum(k + 1 for k in range(len(w.steps))) * ties / total
    assert w.specforge_simulated_acc_len == pytest.approx(forge["simulated_acc_len"], abs=slack)
