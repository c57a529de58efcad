"""`eagle-inspect sweep RUN_DIR SAMPLES` on a run built from a tiny synthetic draft: the trainers'
folder layouts in training order, each checkpoint's accept length equal to `accept`'s, the best
and the last, resuming from the state file, the gate, and the bad folders a real run leaves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.formats.run_dir import find_checkpoints, parse_step

pytestmark = pytest.mark.usefixtures("one_thread")


def _copy(src: Path, dst: Path, noise: float, seed: int = 0, **tensors) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(src / "config.json", dst / "config.json")
    w = load_file(str(src / "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    fc = w["fc.weight"]
    w["fc.weight"] = fc + noise * fc.std() * torch.randn(fc.shape, generator=g, dtype=fc.dtype)
    w.update(tensors)
    save_file(w, str(dst / "model.safetensors"))
    return dst


NOISE = [1.0, 0.0, 0.5]  # the fc's noise per checkpoint: the middle one is the draft itself
LIMIT = 4  # held-out samples per checkpoint


@pytest.fixture
def run(demo, tmp_path):
    """SpecForge-named checkpoints of the demo draft, its fc noised by NOISE: a run whose best
    checkpoint is not its last."""
    samples = demo.draft.parent / "samples" / "held"
    run = tmp_path / "run"
    for i, noise in enumerate(NOISE):
        _copy(demo.draft, run / f"epoch_{i}_step_{(i + 1) * 50}", noise, seed=i)
    return demo.draft, samples, run


@pytest.fixture
def tiny_run(tiny_synthetic, tmp_path):
    draft, samples = tiny_synthetic
    run = tmp_path / "tiny"
    for i in range(3):
        _copy(draft, run / f"epoch_{i}_step_{(i + 1) * 50}", 0.5, seed=i)
    return draft, samples, run


def _sweep(capsys, run, samples, *extra) -> tuple[int, str, str]:
    argv = ["sweep", str(run), str(samples), "--device", "cpu", "--limit", str(LIMIT)]
    rc = main([*argv, *map(str, extra)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_step_names_of_the_trainers() -> None:
    assert parse_step("epoch_3_step_1200") == (1200, 3)
    assert parse_step("epoch_4") == (None, 4)
    assert parse_step("checkpoint-500") == (500, None)
    assert parse_step("checkpoint_7") == (7, None)
    assert parse_step("1200") == (1200, None)
    assert parse_step("final") == (None, None)


def test_checkpoints_come_in_training_order(tmp_path) -> None:
    run = tmp_path / "run"
    for name in ["epoch_1_step_900", "epoch_0_step_100", "checkpoints/1000", "final"]:
        (run / name).mkdir(parents=True)
        (run / name / "config.json").write_text("{}")
        (run / name / "model.safetensors").write_bytes(b"")
    (run / "epoch_2_step_950").mkdir()
    (run / "epoch_2_step_950" / "config.json").write_text("{}")
    scan = find_checkpoints(run)
    assert [c.name for c in scan.checkpoints] == [
        "epoch_0_step_100",
        "epoch_1_step_900",
        "checkpoints/1000",
        "final",
    ]
    assert [(Path(p).name, "cut short" in why) for p, why in scan.refused] == [
        ("epoch_2_step_950", True)
    ]


def test_sweep_finds_the_best_and_equals_accept(capsys, run, tmp_path) -> None:
    draft, samples, folder = run
    state = tmp_path / "state.jsonl"
    rc, out, err = _sweep(capsys, folder, samples, "--json", "--state", state)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    names = [c["name"] for c in doc["checkpoints"]]
    assert names == ["epoch_0_step_50", "epoch_1_step_100", "epoch_2_step_150"]
    assert [c["step"] for c in doc["checkpoints"]] == [50, 100, 150]
    als = [c["accept_length"] for c in doc["checkpoints"]]
    assert als[1] > als[0] + 0.05  # the draft itself beats its heavily noised copy
    assert doc["best"] == names[als.index(max(als))] != names[-1]
    assert doc["last_behind_best"] > 0
    assert doc["best_accept_length"] == max(als)
    assert doc["last_behind_best"] == pytest.approx(max(als) - als[-1])
    # each checkpoint's figure is `accept`'s on the same samples and settings
    for c in doc["checkpoints"]:
        argv = ["accept", c["path"], str(samples), "--wiring", "train", "--json"]
        assert main([*argv, "--limit", str(LIMIT)]) == 0
        acc = json.loads(capsys.readouterr().out)["wirings"][0]
        assert c["accept_length"] == acc["accept_length"]
        assert (c["rounds"], c["accepted"]) == (acc["rounds"], acc["accepted"])
        assert c["per_depth"] == pytest.approx(acc["per_depth"])
        # and its step accuracies eval's, at the chain's depth
        argv = ["eval", c["path"], str(samples), "--ttt-steps", "3", "--json"]
        assert main([*argv, "--limit", str(LIMIT)]) == 0
        steps = json.loads(capsys.readouterr().out)["wirings"][0]["steps"]
        assert c["step_acc"] == pytest.approx([s["all_tok"]["acc"] for s in steps])
        assert c["cond_acc"] == pytest.approx([s["cond"]["acc"] for s in steps])
        assert c["cond_acc"] != c["step_acc"] and len(steps) == 3
    assert len(state.read_text().splitlines()) == 3


def test_a_rerun_reads_finished_checkpoints_and_evaluates_only_new_ones(
    capsys, run, tmp_path
) -> None:
    draft, samples, folder = run
    state = tmp_path / "state.jsonl"
    rc, first, _ = _sweep(capsys, folder, samples, "--json", "--state", state)
    assert rc == 0
    _copy(draft, folder / "epoch_3_step_200", 0.5, seed=1)
    rc, second, err = _sweep(capsys, folder, samples, "--json", "--state", state)
    assert rc == 0
    assert "3 checkpoints read from the state file" in err
    a, b = json.loads(first)["checkpoints"], json.loads(second)["checkpoints"]
    assert b[:3] == a and b[3]["name"] == "epoch_3_step_200"
    assert len(state.read_text().splitlines()) == 4
    # a changed checkpoint is evaluated again: its files are part of the key
    _copy(draft, tmp_path / "other", 3.0, seed=2)
    shutil.copy(tmp_path / "other" / "model.safetensors", folder / "epoch_0_step_50")
    rc, third, err = _sweep(capsys, folder, samples, "--json", "--state", state)
    assert rc == 0 and "3 checkpoints read from the state file" in err
    assert len(state.read_text().splitlines()) == 5  # epoch_0_step_50 evaluated anew
    assert json.loads(third)["checkpoints"][1:] == b[1:]


def test_the_table_chart_svg_and_gate(capsys, run, tmp_path) -> None:
    draft, samples, folder = run
    svg, png = tmp_path / "curve.svg", tmp_path / "curve.png"
    rc, out, err = _sweep(capsys, folder, samples, "--fresh", "--svg", svg, "--png", png)
    assert rc == 0, err
    rc, text, _ = _sweep(capsys, folder, samples, "--fresh", "--json")
    doc = json.loads(text)
    best = doc["best"]
    row = next(line for line in out.splitlines() if line.startswith(f"│ {best}"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[-1] == "best"
    assert cells[2].lstrip(">=") == f"{doc['best_accept_length']:.2f}"
    assert f"▲ best: {best}" in out
    body = svg.read_text()
    assert body.startswith("<svg") and body.count("<circle") == 3
    assert f"best {doc['best_accept_length']:.2f} ({best})" in body
    assert "<script" not in body
    from test_sweep_png import decode

    from inspector.commands import sweep_png

    img = decode(png.read_bytes())  # three blue dots, the best one red, where the SVG has them
    xs = [float(r["step"]) for r in doc["checkpoints"]]
    pts, _ = sweep_png.chart_geometry(xs, [r["accept_length"] for r in doc["checkpoints"]])
    names = [r["name"] for r in doc["checkpoints"]]
    got = [tuple(img[round(y), round(x)]) for x, y in pts]
    assert got == [sweep_png.RED if n == best else sweep_png.BLUE for n in names]
    rc, _, err = _sweep(capsys, folder, samples, "--fresh", "--png", folder / "c.png")
    assert rc == 2 and "--png" in err and "never written" in err
    assert not (folder / "c.png").exists()
    rc, _, err = _sweep(capsys, folder, samples, "--fresh", "--fail-under", 99)
    assert rc == 3 and f"the best checkpoint's accept length is {best}" in err
    rc, _, _ = _sweep(capsys, folder, samples, "--fresh", "--fail-under", 1.0)
    assert rc == 0


def test_bad_checkpoints_are_one_line_each_and_the_rest_still_run(capsys, tiny_run) -> None:
    draft, samples, folder = tiny_run
    half = folder / "epoch_9_step_999"
    half.mkdir()
    shutil.copy(draft / "config.json", half / "config.json")
    broken = folder / "epoch_4_step_400"
    broken.mkdir()
    shutil.copy(draft / "config.json", broken / "config.json")
    (broken / "model.safetensors").write_bytes(b"\x00" * 16)
    # another draft vocabulary, consistent in itself: the chosen target ids shifted by one
    t2d = torch.roll(load_file(str(draft / "model.safetensors"))["t2d"], 1)
    ids = t2d.nonzero()[:, 0]
    d2t = ids - torch.arange(ids.numel())
    remapped = _copy(draft, folder / "epoch_5_step_500", 0.0, t2d=t2d, d2t=d2t)
    rc, out, err = _sweep(capsys, folder, samples, "--fresh", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [c["name"] for c in doc["checkpoints"]][:3] == [
        "epoch_0_step_50",
        "epoch_1_step_100",
        "epoch_2_step_150",
    ]
    refused = {Path(r["path"]).name: r["why"] for r in doc["refused"]}
    assert set(refused) >= {"epoch_9_step_999", "epoch_4_step_400"}
    assert "cut short" in refused["epoch_9_step_999"]
    assert "model.safetensors" in refused["epoch_4_step_400"]
    lines = [line for line in err.splitlines() if line.startswith("skipped")]
    assert len(lines) == 2
    mapped = next(c for c in doc["checkpoints"] if c["name"] == remapped.name)
    assert "vocab map" in mapped["note"] and "vocab map" in err


def test_a_run_without_checkpoints_is_one_line(capsys, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    rc, _, err = _sweep(capsys, tmp_path / "empty", tmp_path)
    assert rc == 2 and "no checkpoint" in err


def test_the_demo_run_writes_checkpoints_the_sweep_reads(capsys, demo, tmp_path) -> None:
    out = tmp_path / "demo-run"
    assert main(["demo", "run", "--out", str(out), "--epochs", "1", "--every", "2"]) == 0
    scan = find_checkpoints(out)
    # the start (the shipped draft), every second step, and the last (3 steps an epoch)
    assert [c.name for c in scan.checkpoints] == [
        "epoch_0_step_0",
        "epoch_0_step_2",
        "epoch_0_step_3",
    ] and not scan.refused
    start = load_file(str(out / "epoch_0_step_0" / "model.safetensors"))
    shipped = load_file(str(demo.draft / "model.safetensors"))
    assert torch.equal(start["fc.weight"], shipped["fc.weight"].float())
    last = load_file(str(out / "epoch_0_step_3" / "model.safetensors"))
    assert not torch.equal(start["fc.weight"], last["fc.weight"])
    assert torch.equal(start["embed_tokens.weight"], last["embed_tokens.weight"])  # frozen
    held = demo.draft.parent / "samples" / "held"
    rc, text, err = _sweep(capsys, out, held, "--fresh", "--json")
    assert rc == 0, err
    assert [c["step"] for c in json.loads(text)["checkpoints"]] == [0, 2, 3]
    assert main(["demo", "run", "--out", str(out)]) == 2  # never over a run


def test_the_report_holds_the_table_chart_settings_and_fingerprints(capsys, run, tmp_path) -> None:
    from inspector.commands.report_file import fingerprint

    draft, samples, folder = run
    md, page = tmp_path / "sweep.md", tmp_path / "sweep.html"
    rc, text, _ = _sweep(capsys, folder, samples, "--fresh", "--json", "--report", md)
    assert rc == 0
    rc, _, _ = _sweep(capsys, folder, samples, "--report", page)
    assert rc == 0
    doc = json.loads(text)
    body = md.read_text()
    best = next(c for c in doc["checkpoints"] if c["name"] == doc["best"])
    assert f"| {best['name']} | {best['step']} | >={best['accept_length']:.2f} |" in body
    assert "▲ best: " + doc["best"] in body
    assert f"`{fingerprint(samples)}`" in body and '"steps": 3' in body
    ckpt = doc["checkpoints"][0]["path"]
    assert f"| checkpoint | `{ckpt}` | `{fingerprint(ckpt)}` |" in body
    html = page.read_text()
    assert html.startswith("<!doctype html>") and html.count("<circle") == 3
    assert "<script" not in html and "http://www.w3.org/2000/svg" in html
    assert f"<td>{best['name']}</td>" in html
    # a fingerprint moves when a checkpoint's weights change size
    before = fingerprint(ckpt)
    with open(Path(ckpt) / "model.safetensors", "ab") as f:
        f.write(b"\0")
    assert fingerprint(ckpt) != before
    rc, _, err = _sweep(capsys, folder, samples, "--report", tmp_path / "r.txt")
    assert rc == 2 and ".md or .html" in err


def test_mixed_layouts_in_one_run_each_read_by_its_own_adapter(capsys, tmp_path) -> None:
    """The same P-EAGLE weights as speculators and as SpecForge saved them (the golden fixtures):
    both evaluated, the second with a note naming the layouts, their figures equal; a SpecForge
    save without its mask token is refused in one line and the run goes on."""
    golden = Path(__file__).resolve().parent / "fixtures" / "golden"
    spec_dir, sf_dir = golden / "speculators-peagle", golden / "specforge-peagle"
    run = tmp_path / "run"
    shutil.copytree(spec_dir / "checkpoint", run / "epoch_0_step_10")
    shutil.copytree(sf_dir / "checkpoint", run / "epoch_1_step_20")
    cfg = json.loads((run / "epoch_1_step_20" / "config.json").read_text())
    (run / "epoch_1_step_20" / "config.json").write_text(json.dumps({**cfg, "ptd_token_id": 127}))
    shutil.copytree(sf_dir / "checkpoint", run / "epoch_2_step_30")
    # SpecForge's layout and another draft vocabulary at once: both notes, in one line
    both = run / "epoch_3_step_40"
    shutil.copytree(run / "epoch_1_step_20", both)
    w = load_file(str(both / "model.safetensors"))
    t2d = torch.roll(w["t2d"], 1)
    ids = t2d.nonzero()[:, 0]
    w.update(t2d=t2d, d2t=ids - torch.arange(ids.numel()))
    save_file(w, str(both / "model.safetensors"))
    rc, out, err = _sweep(capsys, run, spec_dir / "samples", "--fresh", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    a, b, c = doc["checkpoints"]
    assert (a["name"], b["name"], c["name"]) == ("epoch_0_step_10", "epoch_1_step_20", both.name)
    assert a["note"] is None
    assert "its layout is specforge, epoch_0_step_10's speculators" in b["note"]
    layout, vocab = c["note"].split("; ")
    assert layout == b["note"] and vocab.startswith(
        "its vocab map (d2t) moved against epoch_0_step_10's: "
    )
    assert f"--parent {run / 'epoch_0_step_10'}` says whether its head followed" in vocab
    assert a["accept_length"] == b["accept_length"] and a["per_depth"] == b["per_depth"]
    (refused,) = doc["refused"]
    assert Path(refused["path"]).name == "epoch_2_step_30" and "mask_token_id" in refused["why"]
    assert sum(line.startswith("skipped") for line in err.splitlines()) == 1


def test_a_checkpoint_of_another_target_vocabulary_is_refused_naming_its_config(
    capsys, run
) -> None:
    """A checkpoint that reads another target vocabulary than the run's first (its config's
    vocab_size and its embedding and t2d grown to match) cannot read the same samples: one line
    naming its config.json and field; the others are evaluated, and the report says how many
    samples each read and where the state went."""
    draft, samples, folder = run
    other = folder / "epoch_3_step_200"
    w = load_file(str(draft / "model.safetensors"))
    grow = 8
    emb = w["embed_tokens.weight"]
    _copy(
        draft, other, 0.0,
        **{"embed_tokens.weight": torch.cat([emb, emb[:grow]]),
           "t2d": torch.cat([w["t2d"], torch.zeros(grow, dtype=w["t2d"].dtype)])},
    )  # fmt: skip
    cfg = json.loads((other / "config.json").read_text())
    cfg["transformer_layer_config"]["vocab_size"] += grow
    (other / "config.json").write_text(json.dumps(cfg))
    state = folder.parent / "state.jsonl"
    rc, out, err = _sweep(capsys, folder, samples, "--json", "--state", state)
    assert rc == 0, err
    doc = json.loads(out)
    (refused,) = doc["refused"]
    assert refused["path"] == str(other)
    assert refused["why"].startswith(f"{other / 'config.json'}: vocab_size: vocab 520")
    assert [c["name"] for c in doc["checkpoints"]] == [
        f"epoch_{i}_step_{(i + 1) * 50}" for i in range(3)
    ]
    assert doc["samples"] == LIMIT and doc["state"] == str(state)


def test_progress_counts_every_checkpoint_refused_or_not(run, tmp_path) -> None:
    """The bar's callback: one call per checkpoint, in order, out of all of them, a refused one
    included; the report carries no state without one."""
    from inspector.engines import Engine
    from inspector.formats.run_dir import find_checkpoints
    from inspector.serving.checkpoint_sweep import SweepSettings, sweep_run
    from inspector.serving.spec import DraftSpec

    draft, samples, folder = run
    bad = folder / "epoch_1_step_75"
    bad.mkdir()
    shutil.copy(draft / "config.json", bad / "config.json")
    (bad / "model.safetensors").write_bytes(b"\x00" * 16)
    scan = find_checkpoints(folder)
    calls: list[tuple[int, int]] = []
    settings = SweepSettings(DraftSpec(3), Engine.VLLM, limit=2)
    report = sweep_run(
        scan.checkpoints, [str(samples)], settings,
        progress=lambda done, total: calls.append((done, total)),
    )  # fmt: skip
    n = len(scan.checkpoints)
    assert n == 4 and calls == [(k, n) for k in range(1, n + 1)]
    assert len(report.refused) == 1 and len(report.results) == 3
    assert report.state is None and report.samples == 2
    only_bad = sweep_run([c for c in scan.checkpoints if c.path == bad], [str(samples)],
                         settings)  # fmt: skip
    assert (only_bad.results, only_bad.samples, len(only_bad.refused)) == ([], 0, 1)
