"""The Evaluator's per-position numbers against a plain computation from the full logits, and the
contracts of its report, positions, device and error helpers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inspector.errors import InputError
from inspector.evaluate import Evaluator, SkippedSample, is_oom, resolve_device
from inspector.evaluate.positions import PositionList, PositionSpool
from inspector.formats import SampleSet, load_draft
from inspector.memory import MemoryBudget
from inspector.model import fc_input, fc_project, forward_steps


@pytest.fixture(scope="module")
def golden_ev(request):
    from pathlib import Path

    root = Path(request.config.rootpath) / "tests" / "fixtures" / "golden" / "speculators-basic"
    draft = load_draft(root / "checkpoint")
    return Evaluator(draft, SampleSet(root / "samples"), ttt_steps=3)


def _reference(ev: Evaluator, index: int, wiring, steps: int):
    """Per-row numbers of every step straight from forward_steps' full logits, in numpy."""
    draft, s = ev.draft, ev.samples[index]
    t = s.length
    h = fc_project(draft, fc_input(draft, [s.slots[i] for i in wiring.slots]))[: t - 1]
    logits = forward_steps(draft, h, s.input_ids[1:], steps=steps, position_offset=1)
    d2t = draft.vocab.draft_to_target.numpy()
    t2d = draft.vocab.target_to_draft.numpy()
    ids = s.input_ids.numpy()
    mask = s.loss_mask.numpy().astype(bool)
    out = []
    for k, lg in enumerate(logits):
        lg = lg.double().numpy()
        n = t - 2 - k
        rows = np.arange(n)
        true = ids[rows + 2 + k]
        td = t2d[true]
        inv = td >= 0
        logp = (
            lg[:n]
            - np.log(np.exp(lg[:n] - lg[:n].max(1, keepdims=True)).sum(1, keepdims=True))
            - lg[:n].max(1, keepdims=True)
        )
        pred_d = lg[:n].argmax(1)
        true_lg = lg[rows, np.maximum(td, 0)]
        out.append(
            {
                "input": ids[rows + 1 + k],
                "true": true,
                "true_draft": td,
                "pred_draft": pred_d,
                "pred_target": d2t[pred_d],
                "p_pred": np.exp(logp[rows, pred_d]),
                "p_true": np.where(inv, np.exp(logp[rows, np.maximum(td, 0)]), 0.0),
                "rank_true": np.where(inv, (lg[:n] > true_lg[:, None]).sum(1) + 1, -1),
                "loss": np.where(inv, -logp[rows, np.maximum(td, 0)], np.nan),
                "topk_target": d2t[np.argsort(-lg[:n], axis=1, kind="stable")[:, :10]],
                "masked": mask[rows + 1 + k],
                "in_vocab": inv,
                "hit": d2t[pred_d] == true,
                "tail": int(d2t[lg[n].argmax()]),
            }
        )
    return out


@pytest.mark.parametrize("index", [0, 2])
@pytest.mark.parametrize("spec", ["train", "serve"])
def test_predictions_equal_a_plain_computation(golden_ev, index, spec):
    w = golden_ev.wiring(spec)
    got = golden_ev.predict(index, w).steps
    ref = _reference(golden_ev, index, w, 3)
    assert len(got) == len(ref) == 3
    for sp, r in zip(got, ref, strict=True):
        n = len(r["true"])
        assert len(sp) == n and list(sp.pos) == list(range(n))
        for f in ("input", "true", "true_draft", "pred_draft", "pred_target", "rank_true"):
            np.testing.assert_array_equal(getattr(sp, f), r[f], err_msg=f)
        for f in ("masked", "in_vocab", "hit"):
            np.testing.assert_array_equal(getattr(sp, f), r[f], err_msg=f)
        # the same top-10 (order may differ at float-rounding near-ties), in descending order
        assert all(set(a) == set(b) for a, b in zip(sp.topk_target, r["topk_target"], strict=True))
        assert (np.diff(sp.topk_p, axis=1) <= 1e-7).all()
        for f in ("p_pred", "p_true", "loss"):
            np.testing.assert_allclose(getattr(sp, f), r[f], rtol=2e-4, atol=1e-6, err_msg=f)
        np.testing.assert_allclose(sp.topk_p[:, 0], sp.p_pred, rtol=1e-6)
        assert sp.tail_pred_target == r["tail"]
        assert (~sp.in_vocab).any() and sp.in_vocab.any()  # both kinds of rows are checked


def test_position_json_contract(golden_ev):
    sp = golden_ev.predict(0, golden_ev.wiring("train")).steps[1]
    oov = int(np.flatnonzero(~sp.in_vocab)[0])
    inv = int(np.flatnonzero(sp.in_vocab)[0])
    d = sp.position_dict(inv, 7)
    assert d == {
        "sample": 7,
        "step": 1,
        "pos": inv,
        "input": int(sp.input[inv]),
        "true": int(sp.true[inv]),
        "true_draft": int(sp.true_draft[inv]),
        "pred_draft": int(sp.pred_draft[inv]),
        "pred_target": int(sp.pred_target[inv]),
        "p_pred": float(sp.p_pred[inv]),
        "p_true": float(sp.p_true[inv]),
        "rank_true": int(sp.rank_true[inv]),
        "loss": float(sp.loss[inv]),
        "masked": bool(sp.masked[inv]),
        "in_vocab": True,
        "hit": bool(sp.hit[inv]),
        "topk": [
            [int(a), float(b)] for a, b in zip(sp.topk_target[inv], sp.topk_p[inv], strict=True)
        ],
    }
    o = sp.position_dict(oov, 7)
    assert o["in_vocab"] is False and o["true_draft"] is None and o["rank_true"] is None
    assert o["loss"] is None and o["p_true"] == 0.0 and o["hit"] is False


def test_report_contract(golden_ev):
    r = golden_ev.run([golden_ev.wiring("train")], names=["train"])
    d = r.to_dict()
    assert set(d) == {
        "checkpoint",
        "layout",
        "samples",
        "sample_format",
        "device",
        "dtype",
        "stored_dtype",
        "ttt_steps",
        "verifier",
        "slots",
        "wirings",
        "skipped",
        "warnings",
    }
    assert d["layout"] == "speculators" and d["sample_format"] == "speculators-v1"
    assert d["ttt_steps"] == 3 and d["verifier"] is None and d["skipped"] == []
    assert d["stored_dtype"] is None  # a float32 draft is computed as stored
    assert d["warnings"] == []
    assert d["checkpoint"].endswith("checkpoint") and d["samples"] == 3
    assert [s["index"] for s in d["slots"]] == [0, 1, 2, 3]
    assert d["slots"][3]["verifier"] is True
    w = d["wirings"][0]
    assert w["label"] == "train [s0, s1, s2]" and w["wiring"] == [0, 1, 2]
    assert [p["index"] for p in w["per_sample"]] == [0, 1, 2]
    assert "specforge_simulated_acc_len" not in w and "positions" not in w


def test_run_progress_indices_and_limit(golden_ev):
    calls = []
    w = golden_ev.wiring("train")
    r = golden_ev.run([w], progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    r = golden_ev.run([w], indices=[2, 0, 5])
    assert [i for i, _, _ in r.wirings[0].per_sample] == [2, 0] and r.samples == 2
    r = golden_ev.run([w], limit=2, indices=[0, 1, 2])
    assert [i for i, _, _ in r.wirings[0].per_sample] == [0, 1]
    r = golden_ev.run([w], limit=1, positions=True)
    assert {p["sample"] for p in r.wirings[0].positions} == {0}
    assert len(r.wirings[0].positions) == sum(37 - 2 - k for k in range(3))


def test_skipped_sample_from_errors():
    e = InputError("/x/data_1.pt", "loss_mask", "values 2")
    s = SkippedSample.from_error(4, "/fallback.pt", e)
    assert (s.index, s.path, s.field, s.reason) == (4, "/x/data_1.pt", "loss_mask", "values 2")
    assert s.line() == "/x/data_1.pt: loss_mask: values 2"
    assert s.to_dict() == {
        "index": 4,
        "path": "/x/data_1.pt",
        "field": "loss_mask",
        "reason": "values 2",
    }
    s = SkippedSample.from_error(None, "/f.pt", InputError(None, None, "bad"))
    assert (s.path, s.field, s.reason, s.line()) == ("/f.pt", None, "bad", "/f.pt: bad")
    s = SkippedSample.from_error(1, "/g.pt", ValueError("oops"))
    assert (s.path, s.field, s.reason) == ("/g.pt", None, "oops")


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") == resolve_device(None)
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("bogus", "meta", "mps"):
        with pytest.raises(InputError, match="expected auto, cpu, cuda or cuda:N") as e:
            resolve_device(bad)
        assert e.value.field == "device"
    with pytest.raises(InputError, match="cuda requested but CUDA is not available") as e:
        resolve_device("cuda")
    assert e.value.field == "device"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda")
    with pytest.raises(InputError, match=r"cuda:2: only 2 CUDA device\(s\)") as e:
        resolve_device("cuda:2")
    assert e.value.field == "device"


@pytest.mark.parametrize(
    "error,oom",
    [
        (MemoryError(), True),
        (torch.cuda.OutOfMemoryError("CUDA out of memory"), True),
        (RuntimeError("CUDA Out Of Memory. Tried to allocate 2 GiB"), True),
        (RuntimeError("DefaultCPUAllocator: Failed to allocate 9 GB"), True),
        (RuntimeError("shape mismatch"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_is_oom(error, oom):
    assert is_oom(error) is oom


def test_keep_warm_protects_the_sample_on_screen(tiny_synthetic):
    draft_dir, sample_dir = tiny_synthetic
    draft = load_draft(draft_dir)
    per_sample = 3 * 4 * 40 * 64  # three float32 slots of one 40-token sample on the "device"
    budget = MemoryBudget(host=10**9, device=6 * per_sample)  # slots: 1/3, two samples
    ev = Evaluator(draft, SampleSet(sample_dir), budget=budget)
    w = ev.wiring("train")
    ev.predict(0, w)
    ev.predict(1, w)
    ev.keep_warm(0)  # sample 0 is on screen: it outlives sample 1
    ev.predict(2, w)
    kept = {k[0] for k in ev._dev_slots.keys()}  # noqa: SLF001 - the cache is the subject
    assert kept == {0, 2}


def test_position_spool_round_trip():
    spool = PositionSpool(2)
    spool.add(0, [{"sample": 3, "p": 0.5, "topk": [[1, 0.25]]}, {"sample": 3, "p": float("nan")}])
    spool.add(1, [{"sample": 4, "topk": [[2, float("inf")], [3, 0.1]]}])
    spool.add(0, [{"sample": 5, "p": 1.0}])
    assert (spool.count(0), spool.count(1)) == (3, 1)
    assert spool.nonfinite == 2 and spool.nonfinite_samples == {3, 4}
    first = json.loads("[" + "".join(spool.chunks(0, size=7)) + "]")
    assert first == [
        {"sample": 3, "p": 0.5, "topk": [[1, 0.25]]},
        {"sample": 3, "p": None},
        {"sample": 5, "p": 1.0},
    ]
    assert json.loads("[" + "".join(spool.chunks(1)) + "]") == [
        {"sample": 4, "topk": [[2, None], [3, 0.1]]}
    ]
    spool.close()
    kept = PositionList(2)
    kept.add(1, iter([{"a": 1}]))
    assert kept.rows == [[], [{"a": 1}]]


def test_ttt_steps_must_be_positive(golden_ev):
    with pytest.raises(InputError, match="must be at least 1") as e:
        Evaluator(golden_ev.draft, golden_ev.samples, ttt_steps=0)
    assert e.value.field == "ttt-steps"


def test_slot_layers_relabel_the_slots(golden_ev):
    ev = Evaluator(golden_ev.draft, golden_ev.samples, slot_layers=[0, 3, 17, 30])
    assert [s.label for s in ev.slot_info] == ["embed", "L3", "L17", "L30"]
    assert [s.hf_index for s in ev.slot_info] == [0, 3, 17, 30]
    assert ev.slot_info[3].verifier


def test_small_chunks_equal_the_plain_computation(tiny_synthetic):
    """Many row chunks (16 rows) and the tail row in its own chunk: the same numbers."""
    from inspector.model import Chunking

    draft_dir, sample_dir = tiny_synthetic
    ev = Evaluator(load_draft(draft_dir), SampleSet(sample_dir), ttt_steps=3)
    ev.chunking = Chunking(logits_bytes=1)  # 16-row chunks; 40 tokens -> 38, 37, 36 rows
    w = ev.wiring("train")
    for sp, r in zip(ev.predict(0, w).steps, _reference(ev, 0, w, 3), strict=True):
        np.testing.assert_array_equal(sp.pred_target, r["pred_target"])
        np.testing.assert_array_equal(sp.rank_true, r["rank_true"])
        np.testing.assert_allclose(sp.p_true, r["p_true"], rtol=2e-4, atol=1e-6)
        assert sp.tail_pred_target == r["tail"]


def test_chain_and_cond_counts_follow_the_rows(golden_ev):
    """cond at step k counts the rows whose steps < k all hit (masked), hits where step k also does."""
    p = golden_ev.predict(1, golden_ev.wiring("train"))
    alive = p.steps[0].masked.copy()
    for k, (sp, m) in enumerate(zip(p.steps, p.metrics, strict=True)):
        n = len(sp)
        alive_k = alive[:n] & sp.masked
        assert (m.cond.total, m.cond.hits) == (int(alive_k.sum()), int((alive_k & sp.hit).sum())), k
        alive = alive_k & sp.hit


def test_predictions_are_cached_per_sample_and_wiring(golden_ev):
    w = golden_ev.wiring("serve")
    a = golden_ev.predict(0, w)
    assert golden_ev.predict(0, w) is a
    assert golden_ev.predict(1, w) is not a
    fresh = Evaluator(golden_ev.draft, golden_ev.samples)
    once = fresh.predict(2, w, keep=False)  # a one-pass read is not kept...
    assert fresh.predict(2, w, keep=False) is not once
    assert fresh.predict(2, w) is not once  # ...but a kept one is found by the next read
    assert fresh.predict(2, w, keep=False) is fresh.predict(2, w)


def test_a_run_over_the_set_keeps_nothing_per_sample(golden_ev):
    from inspector.formats import SampleSet

    fresh = Evaluator(golden_ev.draft, SampleSet(golden_ev.samples.files))
    fresh.predict(0, fresh.wiring("train"))  # kept by a reader that browses...
    kept = fresh.cache_bytes()
    assert all(kept[k] for k in ("samples", "device_slots", "projections", "predictions")), kept
    fresh.run([fresh.wiring("train"), fresh.wiring("serve")])
    # ...but a one-pass run drops each sample's file, device slots and projections after it
    sizes = fresh.cache_bytes()
    assert sizes["samples"] == sizes["device_slots"] == sizes["projections"] == 0, sizes
    assert sizes["verifier"] == 0
    assert sizes["predictions"] > 0  # what the browsing reader asked to keep stays


def test_out_of_memory_retries_then_gives_up_and_frees_other_samples(tiny_synthetic, monkeypatch):
    from inspector.evaluate import evaluator as evaluator_module

    draft_dir, sample_dir = tiny_synthetic
    ev = Evaluator(load_draft(draft_dir), SampleSet(sample_dir))
    w = ev.wiring("train")
    ev.predict(0, w)
    ev.predict(2, w)
    ev.fc_output(1, w)  # sample 1's slots and projections are on the device
    attempts = []

    def oom(*a, **k):
        attempts.append(k["chunking"].mlp_rows)
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(evaluator_module, "iter_steps", oom)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        ev.predict(1, w)
    assert attempts == [4096, 2048, 1024, 512, 256]
    assert {k[0] for k in ev._dev_slots.keys()} == {1}  # noqa: SLF001 - the cache is the subject
    assert {k[0] for k in ev._proj.keys()} == {1}  # noqa: SLF001


def test_skipped_samples_in_the_report(tiny_synthetic):

    draft_dir, sample_dir = tiny_synthetic
    d = torch.load(sample_dir / "data_1.pt", weights_only=True)
    d["hidden_states"] = [h[:, :8] for h in d["hidden_states"]]
    torch.save(d, sample_dir / "data_1.pt")
    ev = Evaluator(load_draft(draft_dir), SampleSet(sample_dir))
    r = ev.run([ev.wiring("train")])
    (s,) = r.skipped
    assert s.index == 1 and s.path == str(sample_dir / "data_1.pt")
    assert s.field == "hidden_states[0]" and r.verifier is None and r.samples == 2
    assert s.reason.startswith("width 8 but the draft's fc expects target_hidden_size 64: ")


def test_verifier_targets_and_matches(request):
    """With the target's head: the verifier's full-vocab and within-draft-vocab argmax per row, and
    our verifier-match counts, against a direct computation (the demo, two samples)."""
    from pathlib import Path

    from inspector.formats import read_target_head

    demo = Path(request.config.rootpath) / "assets" / "demo"
    head = read_target_head(demo / "target")
    ev = Evaluator(
        load_draft(demo / "draft"),
        SampleSet(demo / "samples" / "train"),
        ttt_steps=2,
        target_head=head,
    )
    d2t = ev.draft.vocab.draft_to_target
    seen_differ = False
    for i in (0, 1):
        s = ev.samples[i]
        y = head.logits(head.normed(s.slots[3]))
        v_full = y.argmax(-1).numpy()
        v_in = d2t[y[:, d2t].argmax(-1)].numpy()
        seen_differ |= bool((v_full != v_in).any())
        p = ev.predict(i, ev.wiring("train"))
        for sp, m in zip(p.steps, p.metrics, strict=True):
            n, k = len(sp), sp.step
            np.testing.assert_array_equal(sp.verifier_target, v_full[1 + k : 1 + k + n])
            np.testing.assert_array_equal(sp.verifier_in_vocab_target, v_in[1 + k : 1 + k + n])
            a = (sp.pred_target == v_in[1 + k : 1 + k + n]) & sp.masked
            b = (sp.pred_target == v_full[1 + k : 1 + k + n]) & sp.masked
            assert (m.verifier_a.hits, m.verifier_b.hits) == (int(a.sum()), int(b.sum()))
            assert m.verifier_a.total == m.verifier_b.total == int(sp.masked.sum())
            assert m.has_trainer
    assert seen_differ  # the two targets differ somewhere: a swap would be seen
    r = ev.run([ev.wiring("train")], limit=1)
    assert r.verifier == str(demo / "target")


def test_a_run_drops_the_verifier_argmax_it_computed():
    from inspector.session import demo_inputs, load_evaluator

    ev = load_evaluator(demo_inputs(), device="cpu")
    assert ev.has_verifier
    w = ev.wiring("train")
    ev.predict(0, w)
    assert ev.cache_bytes()["verifier"] > 0
    ev.run([w], indices=[0, 1])
    assert ev.cache_bytes()["verifier"] == 0


def test_retry_oom_tries_smaller_chunks_then_gives_up():
    from inspector.evaluate.device import retry_oom
    from inspector.model.attention import Chunking

    base = Chunking()
    seen: list[Chunking] = []
    freed: list[int] = []

    def fails_until(n: int):
        def run(c: Chunking):
            seen.append(c)
            if len(seen) < n:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            return "done"

        return run

    dev = torch.device("cpu")
    assert retry_oom(fails_until(3), base, dev, free=lambda: freed.append(1)) == "done"
    assert seen == [base.smaller(1), base.smaller(2), base.smaller(4)] and freed == [1, 1]
    seen.clear()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        retry_oom(fails_until(99), base, dev)
    assert seen == [base.smaller(d) for d in (1, 2, 4, 8, 16)]
    seen.clear()

    def other(c: Chunking):
        seen.append(c)
        raise ValueError("not memory")

    with pytest.raises(ValueError):
        retry_oom(other, base, dev, free=lambda: freed.append(2))
    assert len(seen) == 1 and 2 not in freed
