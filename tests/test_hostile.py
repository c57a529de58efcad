"""Every broken or hostile input of tests/hostile.py through `eval --json`, `doctor --json` and the
app's loader (`open`): the exit code, exactly one line on stderr naming the file and the field, no
traceback, valid JSON when the run succeeds, inputs byte-identical, nothing written elsewhere.

The CLI runs in-process (`inspector.cli.main`), so a case costs milliseconds, not a torch import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile import (
    LOAD_CASES,
    OUT_CASES,
    SAMPLE_CASES,
    Case,
    World,
    build_world,
    copy_world,
    snapshot,
)
from support import error_lines

from inspector.cli import build_parser, main
from inspector.commands.common import load_evaluator, resolve_inputs
from inspector.errors import InputError


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> World:
    return build_world(tmp_path_factory.mktemp("base") / "w")


@pytest.fixture
def world(base: World, tmp_path: Path) -> World:
    return copy_world(base, tmp_path / "w")


def _args(case: Case, w: World) -> list[str]:
    samples = case.samples(w) if case.samples else [str(w.samples)]
    args = [str(w.ckpt), *samples, "--device", "cpu"]
    if case.target:
        args += ["--target", str(w.target)]
    return args + case.extra(w)


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)  # an exception escaping here fails the test: no traceback may reach a user
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _names(line: str, case: Case) -> None:
    assert case.file in line, line
    if case.field is not None:
        assert case.field in line, line
    assert "weights_only" not in line and "Traceback" not in line, line


def _one_line(err: str, case: Case) -> str:
    lines = error_lines(err)
    assert len(lines) == 1, err
    _names(lines[0], case)
    return lines[0]


def _open(w: World, case: Case):
    """The app's loader path: the inputs as `open` parses them, then the first sample."""
    args = build_parser().parse_args(["open", *_args(case, w)])
    ev = load_evaluator(resolve_inputs(args), device="cpu")
    ev.samples.first  # noqa: B018 - what the app reads before it paints
    return ev


@pytest.mark.parametrize("command", ["eval", "doctor", "open"])
@pytest.mark.parametrize("case", LOAD_CASES, ids=lambda c: c.name)
def test_refused_input(case: Case, command: str, world: World, capsys) -> None:
    case.make(world)
    before = snapshot(world.root)
    if command == "open":
        with pytest.raises(InputError) as e:
            _open(world, case)
        assert "\n" not in str(e.value)
        _names(str(e.value), case)
    else:
        rc, out, err = _run(capsys, [command, *_args(case, world), "--json"])
        assert rc == 2
        assert out == ""  # never a half-written document
        line = _one_line(err, case)
        assert line.startswith("eagle-inspect: error: ")
    assert snapshot(world.root) == before


@pytest.mark.parametrize("command", ["eval", "doctor", "open"])
@pytest.mark.parametrize("case", SAMPLE_CASES, ids=lambda c: c.name)
def test_bad_sample_is_skipped(case: Case, command: str, world: World, capsys) -> None:
    case.make(world)
    before = snapshot(world.root)
    bad = world.sample(case.bad_sample)
    if command == "open":
        ev = _open(world, case)
        with pytest.raises(InputError) as e:
            ev.samples[case.bad_sample]
        _names(str(e.value), case)
        (skipped,) = ev.samples.skipped
        assert skipped.path == str(bad) and skipped.index == case.bad_sample
        assert skipped.to_dict() == {
            "index": case.bad_sample,
            "path": str(bad),
            "field": e.value.field,
            "reason": e.value.message,
        }
    elif command == "eval":
        rc, out, err = _run(capsys, ["eval", *_args(case, world), "--json"])
        assert rc == 0
        report = json.loads(out)
        assert report["samples"] == 2  # the good ones still count
        assert [e["path"] for e in report["skipped"]] == [str(bad)]
        skipped_lines = [ln for ln in err.strip().splitlines() if ln.startswith("skipped")]
        assert len(skipped_lines) == 1, err  # the file is named once, on one line
        _names(skipped_lines[0], case)
        assert "used 2 of 3 samples" in err
    else:
        rc, out, err = _run(capsys, ["doctor", *_args(case, world), "--json", "--samples", "3"])
        assert rc in (0, 1)
        json.loads(out)
        skipped_lines = [ln for ln in err.strip().splitlines() if ln.startswith("skipped")]
        assert len(skipped_lines) == 1, err  # named once on stderr, as eval does
        _names(skipped_lines[0], case)
        assert "Traceback" not in err and "weights_only" not in err
    assert snapshot(world.root) == before
    assert not (world.root / "pwned").exists()  # no pickled code ever ran


@pytest.mark.parametrize("name,out_of,prepare", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_write_fixed_out_refused(name, out_of, prepare, world: World, capsys) -> None:
    if prepare is not None:
        prepare(world)
    before = snapshot(world.root)
    out = out_of(world)
    argv = ["doctor", str(world.ckpt), str(world.samples), "--device", "cpu"]
    argv += ["--target", str(world.target), "--json", "--write-fixed", str(out)]
    rc, stdout, err = _run(capsys, argv)
    assert rc == 2 and stdout == ""
    lines = error_lines(err)
    assert len(lines) == 1 and "--write-fixed" in lines[0], err
    assert "\0" not in lines[0]
    assert snapshot(world.root) == before  # nothing written, not even a partial OUT


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_write_fixed_into_read_only_folder(world: World, capsys) -> None:
    ro = world.root / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    before = snapshot(world.root)
    argv = ["doctor", str(world.ckpt), str(world.samples), "--device", "cpu", "--json"]
    rc, out, err = _run(capsys, [*argv, "--write-fixed", str(ro / "fixed")])
    assert rc == 2 and out == "" and len(error_lines(err)) == 1
    assert snapshot(world.root) == before
