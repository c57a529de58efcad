"""The block live loop (`accept --live` on a DFlash draft: the target generates greedily, the
draft proposes a block a round, the target verifies it) against the block replay of the
sequences it wrote: the same rounds, round for round, as vLLM and SGLang count them.

On the block draft trained here (`block_fixtures`) over the demo target, and on the reference's
DFlash2 golden checkpoint over a small random Qwen3 target (its selector path, its sliding
windows). Planted faults (the context one row short, a wrong wiring) move the counts as they
should, and the consistency check catches the first."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from inspector.engines import Engine  # noqa: E402
from inspector.evaluate.block_eval import evaluate_blocks, load_block, predict_blocks  # noqa: E402
from inspector.serving import live as live_module  # noqa: E402
from inspector.serving import live_block  # noqa: E402
from inspector.serving.live import LiveSettings, live_accept  # noqa: E402
from inspector.serving.spec import DraftSpec  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW = 64
LIMIT = 4
GOLDEN = Path(__file__).parent / "golden_block"


def _draft(path: Path, target: Path):
    from inspector.formats import load_block_draft

    return load_block_draft(str(path), target=str(target), dtype="float32", device="cpu")


def _samples(draft_dir: Path, folder: Path, target: Path) -> list:
    _, sample_set = load_block(str(draft_dir), [str(folder)], target=str(target), device="cpu")
    return [sample_set[i] for i in range(len(sample_set))]


def _assert_replay_equals_live(draft, draft_dir, target, folder, wa, engine, k) -> None:
    """Every request's rounds as the block replay walks them over the written sample equal the
    loop's: starts, counts (past the stop too), tokens emitted, SGLang's round after the stop;
    none a lower bound (the sample carries the continuation the last round's count read). And
    `accept`'s JSON field (`per_sample[].accepted_<engine>`) is the loop's list."""
    samples = _samples(draft_dir, folder, target)
    assert wa.per_sample and len(samples) == len(wa.per_sample)
    for s, sample in zip(wa.per_sample, samples, strict=True):
        rounds = predict_blocks(draft, sample, wa.wiring, k + 1).round_list(engine)
        assert [r.start for r in rounds] == s.starts.tolist(), s.index
        assert [r.accepted for r in rounds] == s.accepted.tolist(), s.index
        assert [r.emitted for r in rounds] == s.emitted.tolist(), s.index
        assert [r.after_stop for r in rounds] == s.after_stop.tolist(), s.index
        assert not any(r.bounded for r in rounds), s.index
    report = evaluate_blocks(
        draft, list(enumerate(samples)), [("train", wa.wiring)], engines=(engine,), width=k + 1
    )
    got = [row[f"accepted_{engine.value}"] for row in report.wirings[0].per_sample]
    assert got == [s.accepted.tolist() for s in wa.per_sample]


# (rounds, accepted) of the live loop over the four prompts, 64 tokens each
COUNTS = {(Engine.VLLM, 3): (217, 35), (Engine.SGLANG, 3): (217, 35), (Engine.VLLM, 5): (221, 31)}


@pytest.mark.parametrize(
    ("engine", "k"), [(Engine.VLLM, 3), (Engine.SGLANG, 3), (Engine.VLLM, 5)], ids=str
)
def test_the_block_live_loop_equals_the_block_replay_of_its_sequences(
    block_bed, engine, k, tmp_path
):
    draft = _draft(block_bed.draft, block_bed.target)
    out = tmp_path / "live"
    live = LiveSettings(
        spec=DraftSpec(k),
        max_new=MAX_NEW,
        wirings=["train"],
        out=out,
        limit=LIMIT,
        engine=engine,
        target_dtype="float32",
    )
    report = live_accept(draft, block_bed.target, _prompts(), live)
    (wa,) = report.wirings
    d = wa.to_dict()
    assert report.mode == "live" and d["label"] == "train [L1, L4, L6]"
    assert d["rounds"] == sum(len(s.accepted) for s in wa.per_sample) > 0
    assert d["accepted"] > 0 and not d["accept_length_is_lower_bound"]
    # the loop's own figures, to the last count (the block bed trains on one thread)
    assert (d["rounds"], d["accepted"]) == COUNTS[engine, k]
    after = sum(int(s.after_stop.sum()) for s in wa.per_sample)
    # SGLang's round after the stop: only where the last round left room for more than one
    # token (none of these ends by EOS); vLLM has none
    assert after <= (LIMIT if engine is Engine.SGLANG else 0)
    # each round drafts k; x_P from the prefill, then MAX_NEW - 1 emitted by the rounds
    assert [int(s.emitted.sum()) for s in wa.per_sample] == [MAX_NEW - 1] * LIMIT
    assert all(0 <= a <= k for s in wa.per_sample for a in s.accepted.tolist())
    _assert_replay_equals_live(
        draft, block_bed.draft, block_bed.target, out / "train", wa, engine, k
    )


def _prompts() -> Path:
    from inspector.demo_paths import demo_paths

    return demo_paths().prompts


def test_the_block_live_loop_emits_the_targets_own_greedy_tokens(block_bed, tmp_path):
    """Lossless: whichever wiring feeds the draft, the tokens are the target's greedy ones."""
    from inspector.capture.inputs import read_input
    from inspector.capture.transformers_target import TargetModel

    draft = _draft(block_bed.draft, block_bed.target)
    out = tmp_path / "live"
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=40,
        wirings=["train", "L2,L3,L4"],
        out=out,
        limit=3,
        target_dtype="float32",
        layers="1,4,6,2,3",
    )
    live_accept(draft, block_bed.target, _prompts(), live)
    model = TargetModel(block_bed.target, device="cpu", dtype="float32")
    records, _ = read_input(_prompts(), block_bed.target, vocab_size=512, max_length=512)
    for folder in ("train", "wiring-1-2-3"):
        samples = _samples(block_bed.draft, out / folder, block_bed.target)
        for r, sample in zip(records, samples, strict=False):
            want = r.prompt + model.continue_prompt(r.prompt, 40, temperature=0.0, seed=0)
            assert sample.input_ids.tolist() == want, folder


def test_every_round_drafts_the_replays_block(block_bed, monkeypatch, tmp_path):
    """Round by round, the block the loop proposes is the replay's at the same anchor: the same
    forward over the same context rows 0..n-1, the anchor x_n and k masks."""
    drafted: list[tuple[int, list[int]]] = []
    real = live_block.BlockDecoding._draft

    def spy(self, full, cap):
        d = real(self, full, cap)
        drafted.append((len(full) - 1, d.tokens))
        return d

    monkeypatch.setattr(live_block.BlockDecoding, "_draft", spy)
    draft = _draft(block_bed.draft, block_bed.target)
    out = tmp_path / "live"
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=32,
        wirings=["train"],
        out=out,
        limit=1,
        target_dtype="float32",
    )
    report = live_accept(draft, block_bed.target, _prompts(), live)
    (sample,) = _samples(block_bed.draft, out / "train", block_bed.target)
    bp = predict_blocks(draft, sample, report.wirings[0].wiring, 4)
    by_anchor = {int(n): bp.pred[j].tolist() for j, n in enumerate(bp.anchors)}
    assert drafted and all(by_anchor[n] == tokens for n, tokens in drafted)


def test_a_context_one_row_short_is_caught_by_the_replay(block_bed, monkeypatch, tmp_path):
    """A planted fault in the loop (the draft reads rows 0..n-2, one short of what the target
    verified): its counts change and no longer equal the replay's of its own sequences."""
    draft = _draft(block_bed.draft, block_bed.target)

    live = LiveSettings(
        spec=DraftSpec(3), max_new=MAX_NEW, wirings=["train"], limit=LIMIT, target_dtype="float32"
    )

    def run(out: Path):
        return live_accept(draft, block_bed.target, _prompts(), replace(live, out=out)).wirings[0]

    good = run(tmp_path / "good")
    real = live_block.anchored_block_hidden
    monkeypatch.setattr(
        live_block,
        "anchored_block_hidden",
        lambda dr, ctx, anchors, ids, **kw: real(dr, ctx[:-1], anchors, ids, **kw),
    )
    bad = run(tmp_path / "bad")
    differ = [
        s.index
        for s, t in zip(good.per_sample, bad.per_sample, strict=True)
        if s.accepted.tolist() != t.accepted.tolist()
    ]
    assert differ
    with pytest.raises(AssertionError):
        _assert_replay_equals_live(
            draft, block_bed.draft, block_bed.target, tmp_path / "bad" / "train", bad,
            Engine.VLLM, 3,
        )  # fmt: skip


def test_a_wrong_wiring_accepts_less_and_is_what_its_replay_says(block_bed, tmp_path):
    """The wiring the config lost its ids to (the reference's default spread, HF [2, 3, 4]):
    the same tokens, fewer accepted than the trained HF [1, 4, 6], and the replay of the
    sequences under that wiring gives the loop's rounds."""
    draft = _draft(block_bed.draft, block_bed.target)
    out = tmp_path / "live"
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=MAX_NEW,
        wirings=["train", "L2,L3,L4"],
        out=out,
        limit=LIMIT,
        target_dtype="float32",
        layers="1,4,6,2,3",
    )
    report = live_accept(draft, block_bed.target, _prompts(), live)
    trained, wrong = report.wirings
    assert wrong.to_dict()["label"] == "[L2, L3, L4]"
    t, w = trained.to_dict(), wrong.to_dict()
    assert w["accepted"] < t["accepted"] and w["rounds"] > t["rounds"]
    _assert_replay_equals_live(
        draft, block_bed.draft, block_bed.target, out / "wiring-1-2-3", wrong, Engine.VLLM, 3
    )


@pytest.mark.parametrize("engine", [Engine.VLLM, Engine.SGLANG], ids=str)
def test_an_eos_stops_the_request_and_the_replay_counts_past_it(
    block_bed, engine, monkeypatch, tmp_path
):
    """A token of the greedy continuation made the EOS: the request stops after it (finish
    "stop"), its last round counts its whole path, SGLang counts one more round, and the replay
    (reading the continuation the sample carries) takes the same rounds."""
    real, seqs = live_module.run_block_sequence, []
    extra: tuple[int, ...] = ()

    def recorded(target, draft, prompt, settings, gen=None):
        seq = real(target, draft, prompt, replace(settings, eos=extra or settings.eos), gen)
        seqs.append(seq)
        return seq

    monkeypatch.setattr(live_module, "run_block_sequence", recorded)
    draft = _draft(block_bed.draft, block_bed.target)
    live = LiveSettings(
        spec=DraftSpec(3),
        max_new=40,
        wirings=["train"],
        limit=3,
        engine=engine,
        target_dtype="float32",
    )
    live_accept(draft, block_bed.target, _prompts(), live)
    free = list(seqs)
    extra = (free[0].ids[free[0].prompt_len + 12],)
    seqs.clear()
    out = tmp_path / "live"
    report = live_accept(draft, block_bed.target, _prompts(), replace(live, out=out))
    assert seqs[0].finish == "stop" and seqs[0].ids[-1] == extra[0]
    assert seqs[0].rounds[-1].after_stop == (engine is Engine.SGLANG)
    _assert_replay_equals_live(
        draft, block_bed.draft, block_bed.target, out / "train", report.wirings[0], engine, 3
    )


@pytest.fixture(scope="module")
def qwen3_target(tmp_path_factory) -> Path:
    """A small random Qwen3 target with the golden DFlash2 draft's shapes (hidden 64, 8 layers,
    vocabulary 256), and prompts of random tokens."""
    import transformers

    root = tmp_path_factory.mktemp("qwen3")
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        hidden_size=64,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        vocab_size=256,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(root / "target")
    g = torch.Generator().manual_seed(0)
    lines = [
        json.dumps({"input_ids": torch.randint(0, 250, (12,), generator=g).tolist()})
        for _ in range(3)
    ]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_dflash2_round_drafts_its_selector_path(qwen3_target, monkeypatch, tmp_path):
    """DFlash2 (sliding windows, the candidate selector): every round's block is the replay's
    selector path at that anchor, not the argmax (they differ on some rounds here), and the
    rounds equal the replay's."""
    draft_dir = GOLDEN / "dflash2" / "checkpoint"
    target = qwen3_target / "target"
    draft = _draft(draft_dir, target)
    drafted: list[tuple[int, list[int]]] = []
    real = live_block.BlockDecoding._draft

    def spy(self, full, cap):
        d = real(self, full, cap)
        drafted.append((len(full) - 1, d.tokens))
        return d

    monkeypatch.setattr(live_block.BlockDecoding, "_draft", spy)
    out = tmp_path / "live"
    live = LiveSettings(
        spec=DraftSpec(3), max_new=40, wirings=["train"], out=out, target_dtype="float32"
    )
    report = live_accept(draft, target, qwen3_target / "prompts.jsonl", live)
    (wa,) = report.wirings
    assert wa.to_dict()["label"] == "train [L2, L5, L7]"
    samples = _samples(draft_dir, out / "train", target)
    starts, argmax_differs = 0, 0
    for s, sample in zip(wa.per_sample, samples, strict=True):
        bp = predict_blocks(draft, sample, wa.wiring, 4)
        by_anchor = {int(n): j for j, n in enumerate(bp.anchors)}
        for n in s.starts.tolist():
            j = by_anchor[n]
            assert drafted[starts][1] == bp.pred[j].tolist()
            starts += 1
            argmax_differs += _argmax_row(draft, sample, wa.wiring, n) != bp.pred[j].tolist()
    assert starts == len(drafted) and argmax_differs > 0
    _assert_replay_equals_live(draft, draft_dir, target, out / "train", wa, Engine.VLLM, 3)


def _argmax_row(draft, sample, wiring, n: int) -> list[int]:
    """The block's argmax at anchor n (what a DFlash draft would propose)."""
    from inspector.evaluate.block_eval import context_of
    from inspector.model.block import anchored_block_hidden, head_logits

    block = draft.config.block
    ids = torch.full((1, 4), block.mask_token_id)
    ids[0, 0] = sample.input_ids[n]
    ctx = context_of(sample, wiring, draft)[:n]
    normed = anchored_block_hidden(draft, ctx, torch.tensor([n]), ids)[:, 1:]
    return head_logits(draft, normed).argmax(-1)[0].tolist()


def test_accept_live_on_a_block_draft(block_bed, tmp_path, capsys):
    """`accept DRAFT --live` on a block draft: the EAGLE live accept's JSON (mode live), the
    configured wiring, and the refusals in one line each, exit status 2."""
    from inspector.cli import main

    argv = ["accept", str(block_bed.draft), "--live", "--prompts", str(_prompts())]
    argv += ["--target", str(block_bed.target), "--max-new", "24", "--limit", "2"]
    argv += ["--device", "cpu", "--dtype", "float32"]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["mode"] == "live" and doc["config"]["steps"] == 3
    assert doc["config"]["family"] == "dflash"
    (w,) = doc["wirings"]
    assert w["label"] == "configured [L1, L4, L6]"
    assert w["rounds"] == sum(len(s["accepted"]) for s in w["per_sample"]) > 0
    assert main(argv) == 0  # the table: the block each round drafts, not EAGLE's engine flags
    title = " ".join(capsys.readouterr().out.split())
    assert "(live, dflash: 3 drafts a round, a block of 4 rows)" in title
    for flag in (["--temperature", "0.7"], ["--topk", "2"], ["--p-min", "0.5"]):
        assert main([*argv, *flag]) == 2
        first = capsys.readouterr().err.strip().splitlines()[0]  # then the command's usage
        assert first.startswith(f"eagle-inspect: error: {flag[0]}: ") and "block" in first


def test_accept_live_runs_the_engines_feed_beside_the_configured_one(block_bed, capsys):
    """The copy that lost its ids: the reference (and SGLang) feed the default spread; vLLM
    cannot serve it (a note), so under vLLM the one row is the configured one; under SGLang
    too (its guess is the reference's)."""
    from inspector.cli import main

    argv = ["accept", str(block_bed.lost_ids), "--live", "--prompts", str(_prompts())]
    argv += ["--target", str(block_bed.target), "--max-new", "16", "--limit", "1"]
    argv += ["--device", "cpu", "--dtype", "float32", "--json"]
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr()
    (w,) = json.loads(out.out)["wirings"]
    assert w["label"] == "configured [L2, L3, L4]"
    assert "feeds nothing to run" in out.err


def test_the_replay_reads_the_continuation_as_the_samples_own_tokens(block_bed):
    """The blocks after x_E.. (a request's last round, SGLang's round after the stop) read the
    continuation a sample carries as if it were the sample's own tokens and features. A sample
    of the block case cut after an anchor whose block accepts, the rest made its continuation:
    the counts equal the whole sample's; without the continuation nothing is read there."""
    from inspector.sample import Continuation
    from inspector.wiring import Wiring

    draft = _draft(block_bed.draft, block_bed.target)
    _, sample_set = load_block(
        str(block_bed.draft), [str(block_bed.samples)], target=str(block_bed.target)
    )
    whole = sample_set[0]
    wiring = Wiring((1, 4, 6))  # HF [1, 4, 6]: the samples hold every layer, HF 0..6
    full = predict_blocks(draft, whole, wiring, 4)
    a_full = full.accept_by_start()
    e = next(n for n in full.anchors.tolist() if a_full[n] >= 2 and n + 8 < whole.length)
    t = e + 1  # x_e ends the cut sample: its last round starts at or before e
    cut = replace(
        whole,
        input_ids=whole.input_ids[:t],
        slots=[x[:t] for x in whole.slots],
        loss_mask=whole.loss_mask[:t],
        continuation=Continuation(
            whole.input_ids[t : t + 8], [x[t : t + 8] for x in whole.slots], "length"
        ),
    )
    bp = predict_blocks(draft, cut, wiring, 4)
    assert bp.walked[-1].known == e + 8 and len(bp.tail) == 8
    assert bp.accept_by_start()[: e + 8].tolist() == a_full[: e + 8].tolist()
    rows = {int(n): j for j, n in enumerate(full.anchors)}
    for j, n in enumerate(bp.anchors.tolist()):  # the true tokens read past x_E too
        assert bp.true[j].tolist() == full.true[rows[n]].tolist()
    assert bp.accept_by_start()[e] == a_full[e] >= 2  # the block after x_E, read
    assert not any(r.bounded for r in bp.round_list(Engine.SGLANG))
    bare = predict_blocks(draft, replace(cut, continuation=None), wiring, 4)
    assert len(bare.tail) == 0 and bare.accept_by_start()[e] == 0
