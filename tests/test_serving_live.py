"""The live loop (real speculative decoding against the demo's transformers target) against the
replay of the sequences it wrote: the same accepted count in every round, greedy and sampled."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from serving_oracle import direct_round, random_draft

pytest.importorskip("transformers")

from inspector.engines import Engine  # noqa: E402
from inspector.model import fc_project  # noqa: E402
from inspector.serving.live import LiveSettings, live_accept  # noqa: E402
from inspector.serving.live_draft import LiveDraft  # noqa: E402
from inspector.serving.sampling import sample_verify, target_probs, torch_draws  # noqa: E402
from inspector.serving.sampling_settings import Sampling, Verification, VerifyRule  # noqa: E402
from inspector.serving.spec import DraftSpec  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"
TARGET, DRAFT, PROMPTS = DEMO / "target", DEMO / "draft", DEMO / "prompts.jsonl"
WIRINGS = ("train", "serve")


@pytest.fixture(autouse=True)
def one_thread():
    # The loop runs many small forwards: on 2 shared cores a second OpenMP thread mostly waits
    # (10x slower on a loaded machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _draft(dtype: torch.dtype = torch.float64):
    from inspector.formats import load_draft

    # float64: the loop runs each row's draft forward in other batch shapes than the replay's
    # batched pass; in float32 they agree to rounding (they did on every demo round we ran),
    # float64 keeps a near-tied draft ranking from flipping on another machine's BLAS.
    return load_draft(DRAFT, target=TARGET, dtype=dtype, device="cpu")


def _replayer(
    folder: Path, spec: DraftSpec, dtype: torch.dtype = torch.float64, engine: Engine | None = None
):
    from inspector.serving.replay import Replayer
    from inspector.session import Inputs, load_evaluator

    # ttt_steps = steps: a chain is replayed from the evaluator's TTT predictions, as `accept`
    # does by default; a tree through the batched tree forward.
    ev = load_evaluator(
        Inputs(DRAFT, [str(folder)], target=TARGET), device="cpu", dtype=dtype, ttt_steps=spec.steps
    )
    return ev, Replayer(ev, spec, engine)


def _assert_rounds_equal(report, out: Path, spec: DraftSpec) -> None:
    for text, wa in zip(WIRINGS, report.wirings, strict=True):
        ev, rep = _replayer(out / text, spec, engine=report.engine)
        assert ev.wiring(text) == wa.wiring
        assert wa.per_sample, "no prompt ran"
        for s in wa.per_sample:
            r = rep.replay(s.index, wa.wiring)
            assert r.starts.tolist() == s.starts.tolist(), (text, s.index)
            assert r.accepted.tolist() == s.accepted.tolist(), (text, s.index)
            assert r.emitted.tolist() == s.emitted.tolist(), (text, s.index)
            assert r.after_stop.tolist() == s.after_stop.tolist(), (text, s.index)
            assert not r.bounded.any(), (text, s.index)


SPECS = [DraftSpec(3), DraftSpec(3, 4, 8)]
ENGINE_CASES = [
    (DraftSpec(3), Engine.VLLM),
    (DraftSpec(3, 4, 8), Engine.SGLANG),
    (DraftSpec(3), Engine.SGLANG),
]


@pytest.mark.parametrize(("spec", "engine"), ENGINE_CASES, ids=["chain", "tree", "chain-sglang"])
def test_greedy_live_loop_equals_the_replay_of_its_sequences_round_by_round(spec, engine, tmp_path):
    out = tmp_path / "live"
    live = LiveSettings(
        spec=spec, max_new=48, wirings=list(WIRINGS), out=out, limit=3, engine=engine
    )
    report = live_accept(_draft(), TARGET, PROMPTS, live)
    d = report.to_dict()
    overlap = {"overlap_scheduler": True} if engine.overlap_round else {}
    assert d["config"] == {**spec.to_dict(), "mode": "live", "engine": engine.value, **overlap}
    assert d["conventions"]["engine"] == engine.value
    assert d["samples"] == 3 and not d["skipped"]
    for w in d["wirings"]:
        rounds = sum(len(s["accepted"]) for s in w["per_sample"])
        assert w["rounds"] == rounds > 0
        assert w["accepted"] == sum(sum(s["accepted"]) for s in w["per_sample"])
        # the engines' definition: 1 + accepted / rounds, the last round's count uncut
        assert w["accept_length"] == pytest.approx(1 + w["accepted"] / w["rounds"])
        assert not w["accept_length_is_lower_bound"] and w["lower_bound_requests"] == 0
        after = w["rounds_after_stop"]
        # SGLang's overlap round: one per request whose last round emitted more than one token
        # (it could not know the stop in advance; none of these prompts reaches an EOS)
        multi = sum(s["emitted"][-1 - s.get("rounds_after_stop", 0)] > 1 for s in w["per_sample"])
        assert after == (multi if engine is Engine.SGLANG else 0)
        if engine is Engine.SGLANG:
            for s in w["per_sample"]:
                assert s.get("rounds_after_stop", 0) in (0, 1) and s["emitted"][-1] >= 0
        assert w["emitted_per_round"] == pytest.approx(w["emitted"] / (w["rounds"] - after))
        # every generation: 48 tokens (x_P by the prefill, the rest by rounds) or an EOS
        assert w["emitted"] <= 3 * 47
        # the uncut count is at least the emitted tokens' less the bonus, round by round
        for s in w["per_sample"]:
            assert all(a >= e - 1 for a, e in zip(s["accepted"], s["emitted"], strict=True))
    _assert_rounds_equal(report, out, spec)
    for text, wa in zip(WIRINGS, report.wirings, strict=True):
        for s in wa.per_sample:
            data = torch.load(out / text / f"data_{s.index}.pt", weights_only=True)
            ids, mask = data["input_ids"].tolist(), data["loss_mask"].tolist()
            generated = sum(mask)
            # x_P from the prefill, every other token from a round; 48 of them unless an EOS
            assert generated == 1 + int(s.emitted.sum())
            assert generated == 48 or (generated < 48 and ids[-1] == 0)
            assert mask == [0] * (len(ids) - generated) + [1] * generated
    # The replay's JSON has the same shape.
    _, rep = _replayer(out / "train", spec, engine=engine)
    replayed = rep.run([report.wirings[0].wiring], names=["train"]).to_dict()
    assert replayed["wirings"][0].keys() >= d["wirings"][0].keys() - {"off_target"}
    assert replayed["wirings"][0]["per_sample"] == [
        {**s, "path": str(out / "train" / f"data_{s['index']}.pt")}
        for s in d["wirings"][0]["per_sample"]
    ]


def test_greedy_live_loop_emits_the_targets_own_greedy_continuation(tmp_path):
    """Lossless: speculative decoding emits what the target alone emits (capture --generate)."""
    from inspector.capture.inputs import read_input
    from inspector.capture.transformers_target import TargetModel
    from inspector.formats import SampleSet

    out = tmp_path / "live"
    live = LiveSettings(spec=DraftSpec(3, 4, 8), max_new=40, wirings=["serve"], out=out)
    live_accept(_draft(), TARGET, PROMPTS, live)
    model = TargetModel(TARGET, device="cpu")
    records, _ = read_input(PROMPTS, TARGET, vocab_size=512, max_length=512)
    samples = SampleSet([str(out / "serve")])
    assert len(samples) == len(records)
    for i, r in enumerate(records):
        ids = samples[i].input_ids.tolist()
        mask = samples[i].loss_mask.tolist()
        want = r.prompt + model.continue_prompt(r.prompt, 40, temperature=0.0, seed=0)
        assert ids == want
        assert mask == [0] * len(r.prompt) + [1] * (len(ids) - len(r.prompt))


def _cluster_stats(per_sample) -> tuple[float, float]:
    """Pooled accept length over sequences and its variance (delta method over independent
    sequences: Var(sum e / sum r) ~ sum (e_i - AL r_i)^2 / (sum r)^2, with n/(n-1))."""
    r = np.array([len(s.emitted) for s in per_sample], dtype=float)
    e = np.array([int(s.emitted.sum()) for s in per_sample], dtype=float)
    al = e.sum() / r.sum()
    n = len(r)
    var = ((e - al * r) ** 2).sum() / r.sum() ** 2 * n / (n - 1)
    return al, var


def test_sampled_live_loop_equals_its_replay_and_the_replay_of_the_targets_samples(tmp_path):
    from inspector.capture.run import CaptureSettings, capture

    spec = DraftSpec(3)
    draft = _draft()
    # 1. On its own sequences, round by round: target-only verification stops exactly where the
    #    realised sequence leaves the tree (the bonus is never a child tried at its node).
    out = tmp_path / "live"
    sampled = LiveSettings(
        spec=spec, max_new=64, wirings=["train"], temperature=1.0, seed=1, out=out
    )
    report = live_accept(draft, TARGET, PROMPTS, sampled)
    ev, rep = _replayer(out / "train", spec)
    live = report.wirings[0].per_sample
    for s in live:
        assert rep.replay(s.index, ev.wiring("train")).accepted.tolist() == s.accepted.tolist()
    # 2. In distribution: target-only verification emits the target's own samples, so the live
    #    accept length estimates the same number as the replay of plain sampled continuations
    #    (capture --generate, another seed). Sequences are independent, rounds within one are
    #    not: each set's variance is the delta-method one over sequences (`_cluster_stats`,
    #    conservative here: it counts the spread between prompts, which both sets share). The
    #    difference must lie within 4 standard deviations (a false failure ~6e-5 under the
    #    normal approximation).
    more = (
        live_accept(draft, TARGET, PROMPTS, replace(sampled, seed=2, out=None))
        .wirings[0]
        .per_sample
    )
    plain = tmp_path / "plain"
    capture(
        TARGET,
        PROMPTS,
        plain,
        CaptureSettings(draft=str(DRAFT), device="cpu", generate=64, temperature=1.0, seed=7),
    )
    capture(
        TARGET,
        PROMPTS,
        tmp_path / "plain2",
        CaptureSettings(draft=str(DRAFT), device="cpu", generate=64, temperature=1.0, seed=8),
    )
    replayed = []
    for folder in (plain, tmp_path / "plain2"):
        ev, rep = _replayer(folder, spec)
        replayed += [rep.replay(i, ev.wiring("train")) for i in range(len(ev.samples))]
    al_live, v_live = _cluster_stats(live + more)
    al_rep, v_rep = _cluster_stats(replayed)
    z = (al_live - al_rep) / math.sqrt(v_live + v_rep)
    assert abs(z) < 4, (al_live, al_rep, z)


def test_target_only_verification_accepts_each_child_with_its_target_probability():
    """The live loop's draws (a torch generator) through SGLang's coin rule over siblings:
    P(first child) = p1, P(second) = p2, otherwise a token from p with both removed. The exact
    law is `test_serving_sampling`'s enumeration; this holds the loop's generator to it."""
    # the root's distribution, and the two leaves' (read only for their bonus tokens)
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.2, 0.1]])).expand(3, -1)
    probs = target_probs(logits, Sampling(1.0))
    uniform, categorical = torch_draws(torch.Generator().manual_seed(0))
    rule = Verification(VerifyRule.SGLANG_TARGET_ONLY)
    n = 20000
    counts = {"a": 0, "b": 0, 2: 0, 3: 0}
    for _ in range(n):
        path, bonus = sample_verify(probs, [1, 0], [-1, -1], rule, uniform, categorical)
        if path:
            counts["b" if path == [0] else "a"] += 1
            continue
        counts[bonus] += 1
    # first child: token 1 (p 0.2); second: token 0 (p 0.5); else 2 or 3 in ratio 2:1.
    want = {"b": 0.2, "a": 0.5, 2: 0.2, 3: 0.1}
    for k, p in want.items():
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(counts[k] / n - p) < 5 * sd, (k, counts[k] / n, p)


CASES = [
    (3, 1, None, {}),
    (3, 4, 8, {}),
    (4, 3, 12, {"layers": 2}),
    (3, 2, 7, {"norm_output": True}),
    (4, 3, 12, {"kv": "sglang"}),
]


@pytest.mark.parametrize(("steps", "topk", "n", "opts"), CASES)
def test_live_draft_trees_equal_the_direct_per_node_rounds(steps, topk, n, opts):
    """The loop's draft: its committed KV extended a few rows at a time, its tree from the last
    row, equal to the slow oracle's at that start, on random drafts."""
    opts = dict(opts)
    kv = opts.pop("kv", "exact")
    draft = random_draft(seed=steps * 10 + topk, **opts)
    spec = DraftSpec(steps, topk, n, kv=kv)
    g = torch.Generator().manual_seed(topk)
    t = 14
    ids = torch.randint(0, draft.config.vocab_size, (t,), generator=g)
    ids[t // 2 :] = ids[: t - t // 2]
    slots = torch.randn(t, 3 * draft.config.hidden_size, generator=g, dtype=torch.float64)
    h = fc_project(draft, slots)
    ld = LiveDraft(draft, spec)
    start = 0
    for chunk in (3, 1, 2, 4, 1, 2):  # rows committed per round: the prompt, then a + 1 each
        ld.extend(h[start : start + chunk], ids[start + 1 : start + chunk + 1])
        start += chunk
        tree = ld.tree()
        _, want = direct_round(draft, h, ids, start, steps, topk, spec.draft_tokens, kv=kv)
        assert ld.d2t[tree.tokens[0]].tolist() == want


def test_live_output_folders_are_per_wiring_and_refuse_foreign_ones(tmp_path):
    from inspector.errors import InputError

    out = tmp_path / "live"
    (out / "serve").mkdir(parents=True)
    (out / "serve" / "notes.txt").write_text("someone else's")
    live = LiveSettings(spec=DraftSpec(2), max_new=4, wirings=["serve"], out=out)
    with pytest.raises(InputError, match="not empty"):
        live_accept(_draft(), TARGET, PROMPTS, live)
    live = replace(live, wirings=["train", "1,2,3"], limit=1)
    report = live_accept(_draft(), TARGET, PROMPTS, live)
    assert sorted(p.name for p in out.iterdir()) == ["serve", "train", "wiring-1-2-3"]
    assert report.wirings[1].wiring.slots == (1, 2, 3)
    assert (out / "wiring-1-2-3" / "data_0.pt").is_file()
    # the same settings again: the folder is this loop's own, so it is overwritten
    live_accept(_draft(), TARGET, PROMPTS, replace(live, wirings=["train"]))


@pytest.mark.parametrize("spec", SPECS, ids=["chain", "tree"])
def test_replay_of_capture_generate_equals_the_live_loop_round_by_round(spec, tmp_path):
    """The user's path: `capture --generate` (the target's greedy continuations, the slots from
    one full forward) then `accept` on them, against real speculative decoding, both in float32.
    The two compute the target's features in other batch shapes (a full forward vs the verify
    forwards), so they agree to float32 rounding, and every round agrees on the demo's prompts.
    Saved in bfloat16 (capture's default, as speculators saves) the features move by up to 2^-9
    relative, enough to flip a near-tied draft ranking: one round of the serve wiring's 117 on
    these prompts, so the replay of bf16 samples is exact up to such rounds."""
    from inspector.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(PROMPTS.read_text().splitlines(keepends=True)[:3]))
    cap = tmp_path / "cap"
    argv = ["capture", str(TARGET), str(prompts), "--out", str(cap), "--draft", str(DRAFT)]
    assert main([*argv, "--generate", "48", "--device", "cpu", "--save-dtype", "float32"]) == 0
    settings = LiveSettings(spec=spec, max_new=48, wirings=list(WIRINGS))
    live = live_accept(_draft(torch.float32), TARGET, prompts, settings)
    ev, rep = _replayer(cap, spec, torch.float32)
    for text, wa in zip(WIRINGS, live.wirings, strict=True):
        assert [rep.replay(s.index, ev.wiring(text)).accepted.tolist() for s in wa.per_sample] == [
            s.accepted.tolist() for s in wa.per_sample
        ], text


@pytest.mark.parametrize("engine", [Engine.VLLM, Engine.SGLANG])
def test_an_eos_stops_the_request_where_the_target_emits_it(engine, tmp_path, monkeypatch):
    """The demo's prompts reach no EOS in 40 tokens, so one of the greedy continuation's own
    tokens is made the EOS: each request then stops right after that token's first appearance
    (kept; finish "stop"), with the tokens before it unchanged; its last round counts its whole
    path (the engines count past the stop), SGLang counts one more round after it, and the
    replay of the written sequences takes the same rounds."""
    from inspector.serving import live as live_module

    real, seqs = live_module.run_sequence, []
    extra_eos: tuple[int, ...] = ()  # the EOS the second run adds

    def recorded(target, draft, prompt, settings, gen=None):
        settings = replace(settings, eos=extra_eos or settings.eos)
        seq = real(target, draft, prompt, settings, gen)
        seqs.append(seq)
        return seq

    monkeypatch.setattr(live_module, "run_sequence", recorded)
    spec = DraftSpec(3)
    live = LiveSettings(spec=spec, max_new=40, wirings=["train"], limit=3, engine=engine)
    live_accept(_draft(), TARGET, PROMPTS, live)
    free = list(seqs)
    p0 = free[0].prompt_len
    extra_eos = (free[0].ids[p0 + 12],)  # a token the first request emits 12 tokens in
    seqs.clear()
    out = tmp_path / "live"
    report = live_accept(_draft(), TARGET, PROMPTS, replace(live, out=out))
    stopped = 0
    for a, b, s in zip(free, seqs, report.wirings[0].per_sample, strict=True):
        gen = a.ids[a.prompt_len :]
        if extra_eos[0] in gen:
            cut = a.prompt_len + gen.index(extra_eos[0]) + 1
            assert b.ids == a.ids[:cut] and b.finish == "stop"
            stopped += 1
            assert b.rounds[-1].after_stop == (engine is Engine.SGLANG)
            last = b.rounds[-2 if engine is Engine.SGLANG else -1]
            emitted = sum(r.emitted for r in b.rounds)
            assert emitted == len(b.ids) - b.prompt_len - 1  # x_P from the prefill
            assert last.accepted >= last.emitted - 1  # its whole path, also past the stop
        else:
            assert b.ids == a.ids and b.finish == a.finish == "length"
        assert s.accepted.tolist() == [r.accepted for r in b.rounds]
    assert stopped >= 1 and free[0].finish == "length"
    ev, rep = _replayer(out / "train", spec, engine=engine)
    for s in report.wirings[0].per_sample:
        r = rep.replay(s.index, report.wirings[0].wiring)
        assert r.accepted.tolist() == s.accepted.tolist()
        assert r.after_stop.tolist() == s.after_stop.tolist()


def test_the_features_fed_are_the_targets_own_at_every_position(monkeypatch):
    """What the loop writes as each position's features (the prefill's, each verify forward's,
    and one more forward for the last bonus and the continuation past the stop) is the target's
    own hidden states there: a full forward over the whole sequence gives them, float32
    rounding apart (another batch shape: 1e-4 of the largest entry)."""
    from inspector.serving import live as live_module

    real, calls = live_module.run_sequence, []

    def recorded(*a, **kw):
        seq = real(*a, **kw)
        calls.append((a[0], a[3].plan_slots, seq))
        return seq

    monkeypatch.setattr(live_module, "run_sequence", recorded)
    live = LiveSettings(spec=DraftSpec(3), max_new=24, wirings=["train"], limit=2)
    live_accept(_draft(), TARGET, PROMPTS, live)
    assert len(calls) == 2
    for target, plan_slots, seq in calls:
        full = seq.ids + seq.tail
        _, want, _ = target.forward_cached(torch.tensor(full), plan_slots)
        for s, w in enumerate(want):
            got = torch.cat([seq.slots[s], seq.tail_slots[s]]).float()
            w = w.float().cpu()
            assert got.shape == w.shape and got.shape[0] == len(full)
            scale = float(w.abs().max())
            assert float((got - w).abs().max()) <= 1e-4 * scale, s
