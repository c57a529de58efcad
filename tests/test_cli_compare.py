"""`eagle-inspect compare` on the demo: a draft against itself (exactly 0, [0, 0]), against a
noisier copy of itself (A better, the interval excluding 0), the JSON against the table, and the
`--fail-under` gates of compare and accept (exit 3)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from inspector.cli import main
from inspector.commands.gates import EXIT_GATE

LIMIT = "8"  # samples: small enough for two CPU cores, enough for a clear difference


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def noisy(demo, tmp_path_factory) -> Path:
    """A copy of the demo draft with seeded noise on fc.weight (the demo itself untouched)."""
    import torch
    from safetensors.torch import load_file, save_file

    before = _digest(demo.draft)
    out = tmp_path_factory.mktemp("noisy") / "draft"
    shutil.copytree(demo.draft, out)
    path = out / "model.safetensors"
    tensors = load_file(str(path))
    w = tensors["fc.weight"]
    g = torch.Generator().manual_seed(0)
    tensors["fc.weight"] = w + 0.5 * float(w.std()) * torch.randn(w.shape, generator=g)
    save_file(tensors, str(path))
    assert _digest(demo.draft) == before
    return out


def _run(capsys, args):
    rc = main([*map(str, args), "--device", "cpu"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _compare(capsys, demo, b, *extra):
    return _run(capsys, ["compare", demo.draft, b, demo.train_samples, "--limit", LIMIT, *extra])


def test_a_draft_against_itself_is_exactly_zero(demo, capsys):
    rc, out, _ = _compare(capsys, demo, demo.draft, "--json")
    assert rc == 0
    doc = json.loads(out)
    al = doc["accept_length"]
    assert al["diff"] == 0.0 and al["ci_low"] == 0.0 and al["ci_high"] == 0.0
    assert al["a"] == al["b"] > 1
    assert doc["samples"] == int(LIMIT) and doc["resamples"] == 2000
    assert all(d["diff"] == 0.0 and d["ci_low"] == d["ci_high"] == 0.0 for d in doc["per_depth"])
    assert doc["disagreements"]["a_more"] == doc["disagreements"]["b_more"] == 0


def test_a_noisier_draft_is_worse_with_an_interval_excluding_zero(demo, noisy, capsys):
    rc, out, _ = _compare(capsys, demo, noisy, "--json")
    assert rc == 0
    doc = json.loads(out)
    al = doc["accept_length"]
    assert al["a"] > al["b"]
    assert al["ci_low"] <= al["diff"] <= al["ci_high"] < 0
    assert al["diff"] == pytest.approx(al["b"] - al["a"])
    dis = doc["disagreements"]
    assert dis["a_more"] > dis["b_more"]
    assert dis["first_a_more"] and all(
        set(p) == {"sample", "position"} for p in dis["first_a_more"]
    )
    assert len(doc["per_depth"]) == 3 and doc["by_bucket"]
    # the same accept length as `accept` reports for the demo draft alone
    rc, out, _ = _run(
        capsys,
        ["accept", demo.draft, demo.train_samples, "--limit", LIMIT, "--wiring", "train"]
        + ["--json"],
    )
    assert json.loads(out)["wirings"][0]["accept_length"] == al["a"]


def test_json_numbers_equal_the_tables(demo, noisy, capsys):
    rc, out, _ = _compare(capsys, demo, noisy, "--json", "--seed", "3", "--resamples", "500")
    doc = json.loads(out)
    rc2, table, _ = _compare(capsys, demo, noisy, "--seed", "3", "--resamples", "500")
    assert rc == rc2 == 0
    al = doc["accept_length"]
    shown = re.findall(r"\b[AB]\s+│.*?│\s+(?:>=)?(\d+\.\d{4}) │", table)
    assert shown == [f"{al['a']:.4f}", f"{al['b']:.4f}"]
    assert f"{al['diff']:+.4f}" in table
    assert f"[{al['ci_low']:+.4f}, {al['ci_high']:+.4f}]" in table
    for d in doc["per_depth"]:
        assert f"{d['diff']:+.4f} │ [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]" in table
    dis = doc["disagreements"]
    assert f"A accepts more: {dis['a_more']:,}; where B accepts more: {dis['b_more']:,}" in table


def test_compare_fail_under_both_ways(demo, noisy, capsys):
    rc, _, err = _compare(capsys, demo, noisy, "--json", "--fail-under", "0")
    assert rc == EXIT_GATE == 3
    line = [x for x in err.splitlines() if x.startswith("fail-under:")]
    assert len(line) == 1 and "B - A = -" in line[0] and "95% CI [" in line[0]
    rc, _, err = _compare(capsys, demo, noisy, "--json", "--fail-under", "5")
    assert rc == 0 and "fail-under" not in err
    rc, _, _ = _compare(capsys, demo, demo.draft, "--json", "--fail-under", "0")
    assert rc == 0  # no difference is not worse


def test_accept_fail_under_both_ways(demo, capsys):
    args = ["accept", demo.draft, demo.train_samples, "--limit", "4", "--json"]
    rc, out, err = _run(capsys, args)
    assert rc == 0
    lens = {w["label"].split()[0]: w["accept_length"] for w in json.loads(out)["wirings"]}
    assert lens["serve"] < lens["train"]
    between = (lens["serve"] + lens["train"]) / 2
    rc, _, err = _run(capsys, [*args, "--fail-under", f"{between:.4f}"])
    assert rc == EXIT_GATE
    line = [x for x in err.splitlines() if x.startswith("fail-under:")]
    assert len(line) == 1 and "wiring serve" in line[0] and f"{lens['serve']:.4f}" in line[0]
    rc, _, err = _run(capsys, [*args, "--fail-under", f"{lens['serve'] - 0.01:.4f}"])
    assert rc == 0 and "fail-under" not in err


def test_fail_under_is_refused_with_sweep(capsys):
    rc, _, err = _run(capsys, ["accept", "--sweep", "--fail-under", "2"])
    assert rc == 2 and "--fail-under" in err


def test_the_report_holds_the_difference_and_its_interval(demo, noisy, capsys, tmp_path):
    from inspector.commands.report_file import fingerprint

    page = tmp_path / "cmp.html"
    rc, out, _ = _compare(capsys, demo, noisy, "--json", "--report", page)
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    html = page.read_text()
    al = doc["accept_length"]
    assert f"<td>B - A</td><td></td><td></td><td>{al['diff']:+.4f}</td>" in html
    assert f"[{al['ci_low']:+.4f}, {al['ci_high']:+.4f}]" in html
    assert "the interval excludes 0: B is worse" in html
    assert fingerprint(noisy) in html and "By draft depth" in html and "<script" not in html


def _with_categories(src: Path, out: Path, names: list[str], n: int) -> Path:
    """The first n samples of `src` with a "category" key each (capture's key), names cycled."""
    import torch

    out.mkdir()
    for i in range(n):
        d = torch.load(src / f"data_{i}.pt", weights_only=True)
        d["category"] = names[i % len(names)]
        torch.save(d, out / f"data_{i}.pt")
    shutil.copy(src / "data_config.json", out / "data_config.json")
    cfg = json.loads((out / "data_config.json").read_text())
    cfg.setdefault("format", {})["num_samples"] = n
    (out / "data_config.json").write_text(json.dumps(cfg))
    return out


def test_by_category_where_the_samples_name_one(demo, noisy, capsys, tmp_path):
    n = int(LIMIT)
    both = _with_categories(demo.train_samples, tmp_path / "cat", ["code", "prose"], n)
    rc, out, err = _run(capsys, ["compare", demo.draft, noisy, both, "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    cats = {c["category"]: c for c in doc["by_category"]}
    assert sorted(cats) == ["code", "prose"] and cats["code"]["requests"] == n // 2
    # a category's figures are those of a comparison over its requests alone
    only = tmp_path / "code"
    only.mkdir()
    for i in range(0, n, 2):
        shutil.copy(both / f"data_{i}.pt", only / f"data_{i // 2}.pt")
    cfg = json.loads((both / "data_config.json").read_text())
    cfg["format"]["num_samples"] = n // 2
    (only / "data_config.json").write_text(json.dumps(cfg))
    rc, out2, _ = _run(capsys, ["compare", demo.draft, noisy, only, "--json"])
    alone = json.loads(out2)["accept_length"]
    assert cats["code"]["a"] == pytest.approx(alone["a"])
    assert cats["code"]["b"] == pytest.approx(alone["b"])
    assert cats["code"]["diff"] == pytest.approx(alone["diff"])
    assert cats["code"]["ci_low"] <= cats["code"]["diff"] <= cats["code"]["ci_high"]
    rc, table, _ = _run(capsys, ["compare", demo.draft, noisy, both])
    assert "accept length by category" in table
    row = next(line for line in table.splitlines() if line.startswith("│ code"))
    assert f"{cats['code']['diff']:+.4f}" in row
    # samples without categories: no such table, an empty list
    rc, out3, _ = _run(
        capsys, ["compare", demo.draft, noisy, demo.train_samples, "--limit", "2", "--json"]
    )
    assert json.loads(out3)["by_category"] == []


def test_a_bad_category_is_one_line_naming_the_file(demo, noisy, capsys, tmp_path):
    import torch

    bad = _with_categories(demo.train_samples, tmp_path / "bad", ["x"], 2)
    d = torch.load(bad / "data_1.pt", weights_only=True)
    d["category"] = "two\nlines"
    torch.save(d, bad / "data_1.pt")
    rc, _, err = _run(capsys, ["compare", demo.draft, noisy, bad])
    assert "data_1.pt" in err and "category" in err
