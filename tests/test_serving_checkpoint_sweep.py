"""The sweep's parts (`serving/checkpoint_sweep.py`) one by one: what a finished result is keyed
by, the state file's reading and writing, a result read back, the report's JSON, and the
trainers' own metrics with --target against `eval --target`'s."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from inspector.cli import main
from inspector.engines import Engine
from inspector.formats.run_dir import RunCheckpoint
from inspector.serving.checkpoint_sweep import (
    CheckpointResult,
    SweepRunReport,
    _append_state,
    checkpoint_key,
    read_state,
)
from inspector.serving.spec import DraftSpec

SETTINGS = {"spec": {"steps": 3}, "engine": "vllm"}


def result(name="c", **kw) -> CheckpointResult:
    fields = dict(
        path=f"/run/{name}",
        step=10,
        accept_length=2.5,
        is_bound=False,
        rounds=4,
        accepted=6,
        per_depth=[0.75, 0.5, 0.25],
        step_acc=[0.6],
        cond_acc=[0.6],
        estimate=2.1,
    )
    fields.update(kw)
    return CheckpointResult(name, **fields)


def test_a_result_is_keyed_by_its_folder_its_weights_and_the_settings(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "config.json").write_text("{}")
        (d / "model.safetensors").write_bytes(b"x" * 8)
        (d / "README.md").write_text("notes")
    for f in ("config.json", "model.safetensors"):
        st = (a / f).stat()
        os.utime(b / f, ns=(st.st_atime_ns, st.st_mtime_ns))
    ka = checkpoint_key(RunCheckpoint(a, "a", 1), SETTINGS)
    kb = checkpoint_key(RunCheckpoint(b, "b", 1), SETTINGS)
    assert ka != kb  # the same files elsewhere are another checkpoint
    assert ka == checkpoint_key(RunCheckpoint(a, "a", 1), dict(reversed(SETTINGS.items())))
    assert ka != checkpoint_key(RunCheckpoint(a, "a", 1), {**SETTINGS, "engine": "sglang"})
    (a / "README.md").write_text("other notes")  # not a weight or a config: the same result
    assert checkpoint_key(RunCheckpoint(a, "a", 1), SETTINGS) == ka
    (a / "config.json").write_text('{"x": 1}')
    assert checkpoint_key(RunCheckpoint(a, "a", 1), SETTINGS) != ka


def test_the_state_file_is_written_where_asked_and_a_bad_line_is_skipped(tmp_path):
    state = tmp_path / "deep" / "er" / "state.jsonl"
    _append_state(state, "k1", result("one"))
    with open(state, "a", encoding="utf-8") as f:
        f.write('{"key": "half-writ\n')  # a run killed mid-write
        f.write('{"no": "key"}\n')
    _append_state(state, "k2", result("twö"))
    done = read_state(state)
    assert set(done) == {"k1", "k2"} and done["k2"]["name"] == "twö"
    assert read_state(tmp_path / "absent.jsonl") == {}


def test_a_result_reads_back_as_it_was_written_never_as_resumed():
    r = result(note="its vocab map differs", seconds=1.5, trainer={"specforge_acc": [0.5]})
    d = r.to_dict()
    assert "resumed" not in d
    back = CheckpointResult.from_dict({**d, "resumed": True, "unknown": 1})
    assert back == r and back.resumed is False
    old = {k: v for k, v in d.items() if k not in ("note", "trainer", "seconds")}
    assert CheckpointResult.from_dict(old) == result()  # an older state file's line


def test_the_reports_json():
    rs = [result("a", step=10, accept_length=2.0), result("b", step=20, accept_length=2.5)]
    rs.append(result("c", step=30, accept_length=2.25))
    report = SweepRunReport(
        "/run", DraftSpec(3), Engine.VLLM, "train", 4, rs, [("/run/x", "no weights")], "/s.jsonl"
    )
    d = report.to_dict()
    assert d["schema_version"] == 1 and d["run_dir"] == "/run"
    assert d["config"] == {**DraftSpec(3).to_dict(), "mode": "replay", "engine": "vllm"}
    assert (d["wiring"], d["samples"], d["state"]) == ("train", 4, "/s.jsonl")
    assert [c["name"] for c in d["checkpoints"]] == ["a", "b", "c"]
    assert (d["best"], d["best_accept_length"]) == ("b", 2.5)
    assert d["last_behind_best"] == pytest.approx(0.25)
    assert d["refused"] == [{"path": "/run/x", "why": "no weights"}]
    empty = SweepRunReport("/run", DraftSpec(3), Engine.VLLM, "train", 0, [], []).to_dict()
    assert (empty["best"], empty["best_accept_length"], empty["last_behind_best"]) == (
        None,
        None,
        None,
    )


def test_with_target_each_checkpoint_carries_the_trainers_metrics_as_eval_does(
    demo, tmp_path, capsys
):
    run = tmp_path / "run"
    shutil.copytree(demo.draft, run / "epoch_0_step_10")
    samples = str(demo.draft.parent / "samples" / "held")
    common = ["--target", str(demo.target), "--device", "cpu", "--limit", "2", "--json"]
    capsys.readouterr()
    assert main(["sweep", str(run), samples, "--fresh", *common]) == 0
    (c,) = json.loads(capsys.readouterr().out)["checkpoints"]
    assert main(["eval", str(run / "epoch_0_step_10"), samples, "--ttt-steps", "3", *common]) == 0
    steps = json.loads(capsys.readouterr().out)["wirings"][0]["steps"]
    t = c["trainer"]
    assert set(t) == {"speculators_full_acc", "speculators_cond_acc", "specforge_acc"}
    for key, (trainer, name) in (
        ("speculators_full_acc", ("speculators", "full_acc")),
        ("speculators_cond_acc", ("speculators", "cond_acc")),
        ("specforge_acc", ("specforge", "acc")),
    ):
        assert t[key] == pytest.approx([s["trainer"][trainer][name]["acc"] for s in steps]), key
    assert len(t["specforge_acc"]) == 3 and t["speculators_full_acc"] != t["specforge_acc"]


@pytest.mark.parametrize(
    "flags",
    [("--engine", "sglang"), ("--topk", "2", "--draft-tokens", "4"), ("--kv", "sglang")],
    ids=["sglang-chain", "tree", "sglang-kv"],
)
def test_settings_the_evaluation_cannot_count_are_replayed_as_accept_does(
    demo, tmp_path, capsys, flags
):
    """Only a vLLM chain reads the evaluation's own chain replay; SGLang's count (its round
    after the stop), a tree and SGLang's KV approximation run the replay, equal to accept's."""
    run = tmp_path / "run"
    shutil.copytree(demo.draft, run / "epoch_0_step_10")
    samples = str(demo.draft.parent / "samples" / "held")
    common = ["--device", "cpu", "--limit", "3", "--json", "--steps", "3", *flags]
    if "--kv" in flags:
        common += ["--topk", "2", "--draft-tokens", "5"]
    capsys.readouterr()
    assert main(["sweep", str(run), samples, "--fresh", *common]) == 0
    (c,) = json.loads(capsys.readouterr().out)["checkpoints"]
    assert (
        main(["accept", str(run / "epoch_0_step_10"), samples, "--wiring", "train", *common]) == 0
    )
    (w,) = json.loads(capsys.readouterr().out)["wirings"]
    assert (c["rounds"], c["accepted"]) == (w["rounds"], w["accepted"])
    assert c["accept_length"] == w["accept_length"] and c["per_depth"] == pytest.approx(
        w["per_depth"]
    )
    # a tree's evaluation runs step 0 only (its rounds come from the replay); a chain all steps
    assert len(c["step_acc"]) == (1 if "--topk" in common else 3)


def test_a_finished_checkpoint_is_resumed_under_the_same_target_only(demo, tmp_path, capsys):
    """The state file's key holds the target folder (its trainer metrics are the target
    head's): the same one resumes, another copy of it evaluates again."""
    run = tmp_path / "run"
    shutil.copytree(demo.draft, run / "epoch_0_step_10")
    other = tmp_path / "target-copy"
    shutil.copytree(demo.target, other)
    samples = str(demo.draft.parent / "samples" / "held")
    state = tmp_path / "state.jsonl"
    common = ["--device", "cpu", "--limit", "2", "--json", "--state", str(state)]
    for target, resumed in ((demo.target, False), (demo.target, True), (other, False)):
        capsys.readouterr()
        assert main(["sweep", str(run), samples, "--target", str(target), *common]) == 0
        err = capsys.readouterr().err
        assert ("1 checkpoints read from the state file" in err) == resumed, target
