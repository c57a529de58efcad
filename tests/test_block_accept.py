"""accept on a block draft (DFlash): the block accept length each engine logs, per wiring.

The draft is `block_fixtures.block_bed` (trained on ids TRAINED, HF 1, 4, 6; block size 4). The
figures are checked against a walk written here by hand over `block_eval`'s per-position matches;
the wiring a wrong config makes SGLang and the reference feed accepts less."""

from __future__ import annotations

import json

import numpy as np
import pytest
from block_fixtures import TRAINED

from inspector.cli import main
from inspector.engines import Engine
from inspector.evaluate.block_eval import evaluate_blocks, load_block, predict_blocks
from inspector.wiring import layers_wiring

TRAINED_HF = [k + 1 for k in TRAINED]

pytestmark = pytest.mark.usefixtures("one_thread")


def cli_json(capsys, argv: list[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def hand_walk(pred: np.ndarray, true: np.ndarray, anchors: np.ndarray, runs) -> tuple[int, int]:
    """(rounds, accepted) as vLLM counts them, from the blocks' per-position matches: a round
    after committed x_0..x_n accepts the leading drafts of the block at anchor n that equal the
    true tokens, at most the tokens left in the generation, and the next round starts after
    them and the target's bonus token."""
    row = {int(n): j for j, n in enumerate(anchors)}
    rounds = accepted = 0
    for p, e in runs:
        n = p
        while n < e:
            lead = 0
            for k in range(pred.shape[1]):
                if true[row[n], k] < 0 or pred[row[n], k] != true[row[n], k]:
                    break
                lead += 1
            a = min(lead, e - n)
            rounds += 1
            accepted += a
            n += min(a + 1, e - n)
    return rounds, accepted


def test_block_accept_length_is_the_hand_walk(block_bed):
    draft, sample_set = load_block(
        str(block_bed.draft), [str(block_bed.samples)], target=str(block_bed.target)
    )
    samples = [(i, sample_set[i]) for i in range(4)]
    w = layers_wiring(TRAINED_HF, sample_set.slot_info)
    assert w is not None
    report = evaluate_blocks(draft, samples, [("trained", w)])
    rounds = accepted = runs_n = 0
    for _, sample in samples:
        bp = predict_blocks(draft, sample, w)
        r, a = hand_walk(bp.pred, bp.true, bp.anchors, bp.runs)
        rounds, accepted, runs_n = rounds + r, accepted + a, runs_n + len(bp.runs)
    st = report.wirings[0].stats[Engine.VLLM]
    assert (st.rounds, st.accepted) == (rounds, accepted)
    assert st.accept_length == pytest.approx(1 + accepted / rounds)
    # SGLang counts the same rounds and one more after a request's stop at most
    sg = report.wirings[0].stats[Engine.SGLANG]
    assert rounds <= sg.rounds <= rounds + runs_n


def test_accept_on_the_configured_draft(block_bed, capsys):
    base = ["accept", str(block_bed.draft), str(block_bed.samples)]
    base += ["--target", str(block_bed.target), "--limit", "8"]
    code, doc = cli_json(capsys, [*base, "--json"])
    assert code == 0
    assert doc["block_size"] == 4 and doc["drafts_per_round"] == 3
    assert doc["engines"] == ["vllm", "sglang"]
    (row,) = doc["wirings"]  # vLLM and the reference feed the configured ids; SGLang cannot
    assert row["name"] == "configured" and row["layers"] == TRAINED_HF
    assert "vLLM 0.32" in row["fed_by"]
    sglang = next(f for f in doc["feeds"] if f["engine"] == "sglang")
    assert sglang["fed"] is None and "cannot be fed" in sglang["problem"]
    tau = row["accept_length"]["vllm"]["value"]
    # the trained block draft's figure, to the last count (one thread: the same bits anywhere)
    assert (row["accept_length"]["vllm"]["rounds"], row["accept_length"]["vllm"]["accepted"]) == (
        632,
        272,
    )
    assert tau == 1 + 272 / 632
    # per request, each counted round's accepted drafts (vLLM's per_step_accepted): they add
    # up to the pooled counts, each engine's own
    for e in ("vllm", "sglang"):
        lists = [s[f"accepted_{e}"] for s in row["per_sample"]]
        pooled = row["accept_length"][e]
        assert sum(map(len, lists)) == pooled["rounds"]
        assert sum(map(sum, lists)) == pooled["accepted"]
        assert all(0 <= a <= 3 for a in sum(lists, []))
    # the gate follows the first engine's count; another K runs blocks of K + 1 rows
    assert main([*base, "--fail-under", str(tau + 0.01)]) == 3
    assert "fail-under: wiring configured" in capsys.readouterr().err
    code, doc7 = cli_json(capsys, [*base, "--steps", "5", "--engine", "sglang", "--json"])
    assert code == 0 and doc7["drafts_per_round"] == 5 and doc7["engines"] == ["sglang"]
    assert len(doc7["wirings"][0]["by_block_position"]) == 5


def test_the_lost_ids_feed_accepts_less_than_the_trained_wiring(block_bed, capsys):
    """The config without ids: the reference and SGLang feed their guess HF [2, 3, 4], vLLM
    cannot serve it; the doctor's search finds the trained layers, which accept more."""
    argv = ["accept", str(block_bed.lost_ids), str(block_bed.samples)]
    argv += ["--target", str(block_bed.target), "--limit", "8", "--json"]
    code, doc = cli_json(capsys, argv)
    assert code == 0
    rows = {w["name"]: w for w in doc["wirings"]}
    assert set(rows) == {"configured", "searched"}
    assert rows["configured"]["layers"] == [2, 3, 4]
    assert "SGLang 0.5.23" in rows["configured"]["fed_by"]
    assert rows["searched"]["layers"] == TRAINED_HF
    for e in ("vllm", "sglang"):
        fed = rows["configured"]["accept_length"][e]["value"]
        trained = rows["searched"]["accept_length"][e]["value"]
        assert fed < trained
    assert doc["search"]["trained_ids"] == list(TRAINED)


def test_accept_table_and_refusals(block_bed, capsys):
    base = ["accept", str(block_bed.lost_ids), str(block_bed.samples)]
    base += ["--target", str(block_bed.target), "--limit", "2"]
    capsys.readouterr()
    assert main(base) == 0
    out = capsys.readouterr()
    assert "block accept length" in out.out and "searched" in out.out
    assert "vLLM 0.32 feeds nothing to replay" in out.err
    for extra in (["--live"], ["--topk", "2"], ["--engine", "llamacpp"]):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1


def test_accept_reads_one_sample_at_a_time(block_bed, capsys, monkeypatch):
    """The replay holds no list of samples: with the set's own cache off, at most the sample
    being scored is alive while a block is predicted (a block sample holds every layer)."""
    import weakref

    import inspector.evaluate.block_eval as be
    from inspector.formats.sample_set import SampleSet

    refs: list[weakref.ref] = []
    most = []
    get = SampleSet.__getitem__

    def getitem(self, i):
        self.cache_bytes = 0
        s = get(self, i)
        refs.append(weakref.ref(s))
        return s

    predict = be.predict_blocks

    def counted(*a, **kw):
        most.append(sum(r() is not None for r in refs))
        return predict(*a, **kw)

    monkeypatch.setattr(SampleSet, "__getitem__", getitem)
    monkeypatch.setattr(be, "predict_blocks", counted)
    argv = ["accept", str(block_bed.draft), str(block_bed.samples)]
    argv += ["--target", str(block_bed.target), "--limit", "8", "--json"]
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["samples"] == 8
    assert most and max(most) <= 1


def test_engine_keeps_to_its_own_feed_and_gate(block_bed, capsys):
    """--engine vllm: SGLang's feed is no row and fed_by of nothing; the gate checks the rows
    the counted engine feeds (else the configured one), never the searched wiring."""
    base = ["accept", str(block_bed.lost_ids), str(block_bed.samples)]
    base += ["--target", str(block_bed.target), "--limit", "4", "--json"]
    code, doc = cli_json(capsys, [*base, "--engine", "vllm"])
    assert code == 0
    assert all(f["engine"] != "sglang" for f in doc["feeds"])
    assert all("SGLang" not in by for w in doc["wirings"] for by in w["fed_by"])
    assert doc["gated"] == ["configured"]  # vLLM feeds nothing of the lost ids
    code, doc = cli_json(capsys, [*base, "--engine", "sglang"])
    assert code == 0 and doc["gated"] == ["configured"]  # SGLang's guess is the configured row
    rows = {w["name"]: w["accept_length"]["sglang"]["value"] for w in doc["wirings"]}
    assert rows["configured"] < rows["searched"]
    # a threshold the searched row misses but the gated row passes cannot exist here; one
    # between them fails on the gated row
    mid = (rows["configured"] + rows["searched"]) / 2
    assert main([*base, "--engine", "sglang", "--fail-under", str(mid)]) == 3
    assert "wiring configured" in capsys.readouterr().err
    assert main([*base, "--engine", "sglang", "--fail-under", str(rows["configured"])]) == 0


def test_refusal_and_caption_come_from_the_registry(block_bed, capsys):
    from inspector.engines import all_engines

    base = ["accept", str(block_bed.draft), str(block_bed.samples)]
    base += ["--target", str(block_bed.target), "--limit", "2"]
    capsys.readouterr()
    assert main([*base, "--engine", "llamacpp"]) == 2
    err = capsys.readouterr().err
    readers = [x.id.value for x in all_engines() if any("dflash" in r.drafts for r in x.readers)]
    assert " or ".join(readers) in " ".join(err.split())
    assert main([*base, "--engine", "vllm"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "one more round" not in out  # vLLM has no overlap round
    assert main([*base, "--engine", "sglang"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "SGLang counts one more round" in out


def test_a_dflash2_refusal_names_every_reader():
    """DFlash2 is read by ONNX Runtime GenAI too: the refusal lists the registry's readers."""
    import argparse

    from inspector.commands.accept_block import counting_engines
    from inspector.errors import InputError

    with pytest.raises(InputError, match="ort-genai"):
        counting_engines(argparse.Namespace(engine="llamacpp"), "dflash2")


def test_mean_p_by_block_position(block_bed):
    """`BlockWiringReport.mean_p`: the mean p of the true token per block position, what the
    JSON and the app show."""
    draft, sample_set = load_block(
        str(block_bed.draft), [str(block_bed.samples)], target=str(block_bed.target)
    )
    w = layers_wiring(TRAINED_HF, sample_set.slot_info)
    assert w is not None
    rep = evaluate_blocks(draft, [(i, sample_set[i]) for i in range(2)], [("t", w)]).wirings[0]
    expect = [float(p / c) if c else None for p, c in zip(rep.p_sum, rep.counts, strict=True)]
    assert rep.mean_p == pytest.approx(expect)
    assert [r["mean_p"] for r in rep.to_dict()["by_block_position"]] == rep.mean_p
