"""One exit-status contract for every command (`inspector.commands.exit_codes`; the Commands at a
glance page holds the table): 0 nothing wrong, 1 a problem found, 2 bad input, 3 a gate failed, 4
the run could not finish. Each on the demo: a clean draft, a wrong wiring, bad input, a gate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, error_lines

from inspector.cli import main
from inspector.commands.exit_codes import ExitCode, for_verdict

DEMO = ROOT / "assets" / "demo"
HELD = str(DEMO / "samples" / "held")
pytestmark = pytest.mark.usefixtures("one_thread")


def _deployed(tmp_path: Path) -> Path:
    """The demo draft deployed with a config naming the layers an engine feeds ([2, 4, 6]), not
    the ones its weights were trained on ([0, 2, 4]): the README's wrong wiring."""
    folder = tmp_path / "deployed"
    shutil.copytree(DEMO / "draft", folder)
    shutil.copyfile(DEMO / "engine-logs" / "deployed-config.json", folder / "config.json")
    return folder


def test_the_codes_are_the_documented_ones():
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "PROBLEM": 1,
        "BAD_INPUT": 2,
        "GATE": 3,
        "FAILED": 4,
        "INTERRUPTED": 130,
    }
    page = (ROOT / "docs" / "reference" / "command-table.md").read_text(encoding="utf-8")
    for c in ExitCode:
        assert f"| {int(c)} | `{c.name}` |" in page, c


def _verdict_enum():
    """reconcile's `Verdict`, from the module of the reconciliation's result."""
    import importlib

    for name in ("inspector.doctor.reconcile.result", "inspector.doctor.reconciliation"):
        try:
            return importlib.import_module(name).Verdict
        except ImportError:
            continue
    raise AssertionError("no Verdict enum where reconcile keeps its result")


def test_every_reconcile_verdict_has_its_status():
    Verdict = _verdict_enum()

    clean = {v for v in Verdict if for_verdict(v) == ExitCode.OK}
    assert clean == {Verdict.AS_IS, Verdict.SYNTHETIC}
    assert for_verdict("wrong_wiring") == for_verdict(Verdict.ENGINE_FAULT) == ExitCode.PROBLEM
    assert for_verdict(Verdict.UNDECIDED) == ExitCode.PROBLEM  # not ruled out: a CI looks


def test_doctor_exits_0_on_a_clean_draft_and_1_on_a_wrong_wiring(capsys, tmp_path):
    assert main(["doctor", "--samples", "2", "--json", "--device", "cpu"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert not [f for f in doc["findings"] if f["severity"] == "error"]
    argv = ["doctor", str(_deployed(tmp_path)), HELD, "--samples", "2", "--json"]
    assert main([*argv, "--device", "cpu"]) == ExitCode.PROBLEM
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"][0]["kind"] == "wiring" and doc["findings"][0]["severity"] == "error"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from support import capture_generated

    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 40)


def test_reconcile_exits_0_on_the_draft_as_it_is_and_1_on_a_wrong_wiring(
    capsys, generated, tmp_path
):
    from support import vllm_line

    capsys.readouterr()
    argv = ["accept", str(DEMO / "draft"), str(generated), "--steps", "3", "--json"]
    assert main([*argv, "--device", "cpu"]) == ExitCode.OK  # accept reports, it never judges
    train, serve = json.loads(capsys.readouterr().out)["wirings"]
    for wiring, status, verdict in (
        (train, ExitCode.OK, "as_is"),
        (serve, ExitCode.PROBLEM, "wrong_wiring"),
    ):
        log = tmp_path / f"{verdict}.log"
        log.write_text(vllm_line(wiring, 3) + "\n")
        argv = ["reconcile", str(DEMO / "draft"), str(generated), "--engine-log", str(log)]
        assert main([*argv, "--json", "--device", "cpu"]) == status, verdict
        assert json.loads(capsys.readouterr().out)["verdict"] == verdict
        # the table, not only --json, exits with the verdict's status
        assert main([*argv, "--device", "cpu"]) == status, verdict
        capsys.readouterr()


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", str(DEMO / "draft"), "no-such-folder"],
        ["eval", str(DEMO / "draft"), HELD, "--wiring", "0,9,1"],
        ["accept", str(DEMO / "draft"), HELD, "--device", "no-such-device"],
    ],
    ids=["missing samples", "no such slot", "bad device"],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == ExitCode.BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and len(error_lines(err)) == 1, err


@pytest.mark.parametrize(
    "argv", [["eval", "--wirng", "train"], ["doctor", "--engine", "llamcpp"], ["sweep"]]
)
def test_bad_usage_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == ExitCode.BAD_INPUT
    assert "error:" in capsys.readouterr().err


def test_a_failing_gate_exits_3_after_its_report(capsys):
    argv = ["accept", "--limit", "4", "--device", "cpu", "--json"]
    assert main([*argv, "--fail-under", "1.0"]) == ExitCode.OK
    capsys.readouterr()
    assert main([*argv, "--fail-under", "9"]) == ExitCode.GATE
    out, err = capsys.readouterr()
    assert json.loads(out)["wirings"]  # the report first, then the gate's line
    assert err.strip().splitlines()[-1].startswith("fail-under: wiring train")


def test_a_run_that_cannot_finish_exits_4_not_1(capsys, monkeypatch):
    """Out of memory (one line) and a crash (its traceback) say nothing of the draft: 4, never
    the status of a problem found."""
    from inspector.evaluate import evaluator as evaluator_module

    def oom(*a, **k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(evaluator_module, "iter_steps", oom)
    assert main(["eval", "--limit", "1", "--device", "cpu"]) == ExitCode.FAILED
    assert capsys.readouterr().err.strip() == (
        "eagle-inspect: failed: CUDA out of memory. Tried to allocate 2.00 GiB"
    )

    def crash(*a, **k):
        raise KeyError("a bug")

    monkeypatch.setattr(evaluator_module, "iter_steps", crash)
    assert main(["eval", "--limit", "1", "--device", "cpu"]) == ExitCode.FAILED
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'a bug'" in err


def test_the_process_exits_with_the_status():
    """`python -m inspector` / the console script: the IntEnum reaches the shell as its number."""
    p = subprocess.run(
        [sys.executable, "-m", "inspector", "eval", str(DEMO / "draft"), "no-such-folder"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr


def _documented(command: str) -> dict[str, str]:
    """The Commands at a glance page's `--json` table of `command`: key -> type."""
    import re

    page = (ROOT / "docs" / "reference" / "command-table.md").read_text(encoding="utf-8")
    start = page.index(f"`eagle-inspect {command} --json`")
    table = page[start:].split("\n\n", 2)[1]
    return dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", table, re.M))


def _type_name(v) -> str:
    if isinstance(v, bool):
        return "bool"
    for t in (int, float, str, dict):
        if isinstance(v, t):
            return {"dict": "object"}.get(t.__name__, t.__name__)
    return "list"


def _holds_the_documented_schema(command: str, doc: dict) -> None:
    want = _documented(command)
    assert list(doc) == list(want), command
    for key, v in doc.items():
        kinds = want[key].replace("list[", "list ").split(" or ")
        shown = [k.split()[0] for k in kinds]
        assert ("null" in shown) if v is None else _type_name(v) in shown, (command, key, v)


def test_the_json_schemas_on_the_commands_page_are_what_the_commands_print(
    capsys, generated, tmp_path
):
    runs = {
        "eval": ["eval", "--limit", "2"],
        "accept": ["accept", "--limit", "2"],
        "doctor": ["doctor", "--samples", "1"],
        "compare": ["compare", str(DEMO / "draft"), str(_deployed(tmp_path)), HELD, "--limit", "4"],
    }
    for command, argv in runs.items():
        capsys.readouterr()
        assert main([*argv, "--json", "--device", "cpu"]) == ExitCode.OK, command
        _holds_the_documented_schema(command, json.loads(capsys.readouterr().out))
    log = DEMO / "engine-logs" / "vllm-deployed-k3.log"
    argv = ["reconcile", str(DEMO / "draft"), str(generated), "--engine-log", str(log)]
    main([*argv, "--json", "--device", "cpu"])
    _holds_the_documented_schema("reconcile", json.loads(capsys.readouterr().out))
