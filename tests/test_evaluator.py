"""The Evaluator in bounded memory: chunked logits, out-of-memory retries, byte-bounded caches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inspector.evaluate import Evaluator
from inspector.evaluate import evaluator as evaluator_module
from inspector.formats import SampleSet, load_draft
from inspector.memory import MemoryBudget
from inspector.model import Chunking


@pytest.fixture
def ev(tiny_synthetic):
    draft_dir, sample_dir = tiny_synthetic
    return Evaluator(load_draft(draft_dir), SampleSet(sample_dir), ttt_steps=3)


FIELDS = ("pred_target", "p_pred", "p_true", "rank_true", "topk_target", "topk_p", "hit", "loss")


def _same(a, b):
    assert len(a.steps) == len(b.steps)
    for x, y in zip(a.steps, b.steps, strict=True):
        for f in FIELDS:
            np.testing.assert_allclose(getattr(x, f), getattr(y, f), rtol=1e-5, atol=1e-6)
        assert x.tail_pred_target == y.tail_pred_target


def test_small_chunks_give_the_same_predictions(ev, tiny_synthetic):
    w = ev.wiring("train")
    ref = ev.predict(0, w)
    ev2 = Evaluator(ev.draft, SampleSet(tiny_synthetic[1]), ttt_steps=3)
    ev2.chunking = Chunking(mlp_rows=16, attn_block_bytes=1, logits_bytes=1)  # 16-row chunks
    assert ev2.chunking.logit_rows(96) == 16
    _same(ev2.predict(0, w), ref)


def test_out_of_memory_is_retried_in_smaller_chunks(ev, monkeypatch):
    real = evaluator_module.iter_steps
    seen: list[Chunking] = []

    def flaky(*a, chunking, **k):
        seen.append(chunking)
        if len(seen) < 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")
        return real(*a, chunking=chunking, **k)

    w = ev.wiring("train")
    ref = Evaluator(ev.draft, ev.samples, ttt_steps=3).predict(1, w)
    monkeypatch.setattr(evaluator_module, "iter_steps", flaky)
    _same(ev.predict(1, w), ref)
    assert [c.mlp_rows for c in seen] == [4096, 2048, 1024]


def test_other_errors_are_not_retried(ev, monkeypatch):
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(evaluator_module, "iter_steps", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        ev.predict(0, ev.wiring("train"))
    assert calls == [1]


def test_caches_stay_within_their_byte_budget(tiny_synthetic):
    draft_dir, sample_dir = tiny_synthetic
    budget = MemoryBudget(host=200_000, device=None)
    ev = Evaluator(load_draft(draft_dir), SampleSet(sample_dir), ttt_steps=2, budget=budget)
    for i in range(3):
        for w in ("train", "serve"):
            ev.predict(i, ev.wiring(w))
    sizes = ev.cache_bytes()
    assert ev.samples.cache_bytes == budget.host_share("samples")
    assert sizes["samples"] <= budget.host_share("samples")
    assert sizes["predictions"] <= budget.host_share("predictions")
    assert sizes["projections"] <= budget.device_share("projections")
    assert sizes["device_slots"] <= budget.device_share("device_slots")
    assert sizes["predictions"] > 0  # something is kept: the budget is not simply zero


def test_heap_trimming_is_checked_after_new_predictions_at_a_quarter_of_the_budget(
    tiny_synthetic, monkeypatch
):
    from inspector import memory
    from inspector.memory import TRIM_FREE_BYTES

    draft_dir, sample_dir = tiny_synthetic
    seen = []
    monkeypatch.setattr(memory, "trim_host_heap", lambda n: seen.append(n) or False)
    small = Evaluator(
        load_draft(draft_dir), SampleSet(sample_dir), budget=MemoryBudget(host=400, device=None)
    )
    small._trim_heap.interval = 0  # noqa: SLF001 - every call is due
    small.predict(0, small.wiring("train"))
    assert seen == [100]
    big = Evaluator(
        load_draft(draft_dir), SampleSet(sample_dir), budget=MemoryBudget(host=2**40, device=None)
    )
    big._trim_heap.interval = 0  # noqa: SLF001
    big.predict(1, big.wiring("serve"))
    big.predict(1, big.wiring("serve"))  # cached: nothing new was computed, nothing to trim
    assert seen == [100, TRIM_FREE_BYTES]
    big._trim_heap.interval = 3600  # noqa: SLF001 - the default throttle: not due again yet
    big.predict(2, big.wiring("serve"))
    big.predict(0, big.wiring("serve"))
    assert seen == [100, TRIM_FREE_BYTES, TRIM_FREE_BYTES]


def test_non_finite_numbers_are_json_null(ev, capsys):
    """A NaN in a position's numbers is written as null, the document stays valid JSON, and a
    warning names the sample."""
    import json

    from inspector.commands.output import write_json

    sp = ev.predict(0, ev.wiring("train")).steps[0]
    sp.p_true[0] = np.nan
    sp.topk_p[0, 1] = np.inf
    d = sp.position_dict(0, 0)
    assert write_json({"positions": [d]}) == 2
    out = json.loads(capsys.readouterr().out)["positions"][0]
    assert out["p_true"] is None and out["topk"][1][1] is None
    assert isinstance(out["p_pred"], float)
