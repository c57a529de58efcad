"""The CLI under hostile names, bad values, closed pipes, bad samples and non-finite numbers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import error_lines

from inspector.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def golden_copy(golden, tmp_path):
    src = golden / "speculators-basic"
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src / "checkpoint", ckpt)
    samples = tmp_path / "samples"
    shutil.copytree(src / "samples", samples)
    return ckpt, samples


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--limit", "0"], "--limit"),
        (["--limit", "-1"], "--limit"),
        (["--limit", "３"], "--limit"),  # a non-ASCII digit
        (["--ttt-steps", "0"], "--ttt-steps"),
        (["--memory-budget", "1k"], "--memory-budget"),
        (["--memory-budget", "٨G"], "--memory-budget"),  # an Arabic-Indic eight
    ],
)
def test_bad_values_exit_2_naming_the_flag(golden_copy, capsys, argv, flag):
    ckpt, samples = golden_copy
    with pytest.raises(SystemExit) as e:
        rc = main(["eval", str(ckpt), str(samples), *argv])
        raise SystemExit(rc)
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("device", ["bogus", "meta", "cuda:7"])
def test_bad_device_exits_2_with_one_line(golden_copy, capsys, device):
    ckpt, samples = golden_copy
    assert main(["eval", str(ckpt), str(samples), "--device", device]) == 2
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 1 and "--device" in err[0]


def test_non_ascii_digits_name_no_slot(golden_copy, capsys):
    ckpt, samples = golden_copy
    assert main(["eval", str(ckpt), str(samples), "--wiring", "٠,1,2"]) == 2
    assert "wiring" in capsys.readouterr().err


def test_markup_and_control_characters_in_file_names(golden_copy, capsys):
    ckpt, samples = golden_copy
    odd = samples.parent / "run["  # with the file below: ".../run[/bold].pt", a closing tag
    odd.mkdir()
    d = torch.load(samples / "data_0.pt", weights_only=True)
    d["hidden_states"] = [h[:, :32] for h in d["hidden_states"]]  # skipped, named on stderr
    torch.save(d, odd / "bold].pt")
    (samples / "data_0.pt").unlink()
    (samples / "data_1.pt").rename(samples / "evil\x1b[31m.pt")
    assert main(["eval", str(ckpt), str(samples), str(odd), "--per-sample"]) == 0
    cap = capsys.readouterr()
    out = cap.out
    assert (
        "run[/bold].pt: hidden_states[0]: width 32" in cap.err
    )  # printed as is, not taken as markup
    assert "\x1b[31m" not in out and "evil\\x1b[31m.pt" in out
    # a one-line error naming such a file stays one line and shows the escape
    bad = samples / "bad\nname\x1b.pt"
    bad.write_bytes(b"not a torch file")
    assert main(["eval", str(ckpt), str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(error_lines(err)) == 1 and "bad\\nname\\x1b.pt" in err


def test_skipped_samples_are_named_once_and_in_json(golden_copy, capsys):
    ckpt, samples = golden_copy
    d = torch.load(samples / "data_2.pt", weights_only=True)
    d["hidden_states"] = [h[:, :32] for h in d["hidden_states"]]
    torch.save(d, samples / "data_2.pt")
    assert main(["eval", str(ckpt), str(samples), "--json"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["samples"] == 2
    (sk,) = doc["skipped"]
    assert sk["path"].endswith("data_2.pt") and sk["field"] == "hidden_states[0]"
    assert "width 32" in sk["reason"]
    assert cap.err.count("data_2.pt") == 1 and "used 2 of 3 samples" in cap.err


def test_every_sample_unusable_is_bad_input(golden_copy, capsys):
    ckpt, samples = golden_copy
    for f in samples.glob("*.pt"):
        d = torch.load(f, weights_only=True)
        d["hidden_states"] = [h[:, :32] for h in d["hidden_states"]]
        torch.save(d, f)
    assert main(["eval", str(ckpt), str(samples), "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "none of the 3 sample files is usable" in cap.err


def test_non_finite_positions_are_null_with_a_warning(golden_copy, capsys):
    ckpt, samples = golden_copy
    d = torch.load(samples / "data_1.pt", weights_only=True)
    d["hidden_states"][0][20, :] = float("nan")
    torch.save(d, samples / "data_1.pt")
    assert main(["eval", str(ckpt), str(samples), "--json", "--positions"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)  # valid JSON, whatever the numbers
    nulls = [p for p in doc["wirings"][0]["positions"] if p["p_pred"] is None]
    assert nulls and {p["sample"] for p in nulls} == {1}
    assert "written as null" in cap.err and "samples 1" in cap.err


@pytest.mark.parametrize("argv", [["eval", "--limit", "2"], ["eval", "--limit", "1", "--json"]])
def test_a_reader_that_leaves_early_ends_quietly(argv):
    proc = subprocess.Popen(
        [sys.executable, "-m", "inspector", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    proc.stdout.close()  # like `| head` that has already exited
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err


def test_doctor_names_the_samples_it_could_not_score(golden_copy, capsys):
    ckpt, samples = golden_copy
    d = torch.load(samples / "data_2.pt", weights_only=True)
    d["hidden_states"] = [h[:, :32] for h in d["hidden_states"]]
    torch.save(d, samples / "data_2.pt")
    main(["doctor", str(ckpt), str(samples), "--json"])
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    (f,) = [f for f in doc["findings"] if f["kind"] == "samples"]
    assert f["summary"].startswith("1 of 3 samples could not be scored: #2 ")
    assert "data_2.pt: hidden_states[0]: width 32" in f["summary"]
    (sk,) = doc["skipped"]  # the same as eval's: index, path, field, reason
    assert (sk["index"], sk["path"], sk["field"]) == (
        2,
        str(samples / "data_2.pt"),
        "hidden_states[0]",
    )
    assert cap.err.count("data_2.pt") == 1 and cap.err.startswith("skipped ")


def test_sample_warnings_are_named_on_stderr_and_in_json(golden_copy, capsys):
    ckpt, samples = golden_copy
    d = torch.load(samples / "data_1.pt", weights_only=True)
    d["hidden_states"][3][4, 5] = float("nan")
    torch.save(d, samples / "data_1.pt")
    nan = {"index": 1, "path": str(samples / "data_1.pt"), "warning": "slot 3 contains NaN/Inf"}
    for argv in (["eval"], ["doctor"]):
        main([*argv, str(ckpt), str(samples), "--json"])
        cap = capsys.readouterr()
        assert json.loads(cap.out)["warnings"] == [nan], argv
        assert f"warning {samples / 'data_1.pt'}: slot 3 contains NaN/Inf" in cap.err, argv


def test_float16_evaluation_of_wider_slots_is_warned_once(golden_copy, capsys):
    ckpt, samples = golden_copy
    d = torch.load(samples / "data_0.pt", weights_only=True)
    d["hidden_states"] = [h.float() for h in d["hidden_states"]]
    d["hidden_states"][1][2, 3] = 1e6
    torch.save(d, samples / "data_0.pt")
    main(["eval", str(ckpt), str(samples), "--json", "--dtype", "float16", "--ttt-steps", "2"])
    cap = capsys.readouterr()
    (w,) = json.loads(cap.out)["warnings"]
    assert w["index"] == 0 and w["warning"] == (
        "slot 1 holds |values| up to 1e+06, beyond float16's 65504: "
        "--dtype float16 turns them into inf"
    )
    main(["eval", str(ckpt), str(samples), "--json"])  # float32: nothing to say
    assert json.loads(capsys.readouterr().out)["warnings"] == []


def test_positions_spooled_to_disk_give_the_in_memory_document(golden, capsys):
    """`eval --json --positions` streams positions from a spool: the same document as the one
    built in memory."""
    from inspector.commands.output import json_safe
    from inspector.session import Inputs, load_evaluator

    root = golden / "speculators-basic"
    argv = ["eval", str(root / "checkpoint"), str(root / "samples"), "--json", "--positions"]
    assert main([*argv, "--ttt-steps", "2", "--device", "cpu"]) == 0
    streamed = json.loads(capsys.readouterr().out)
    ev = load_evaluator(
        Inputs(root / "checkpoint", [str(root / "samples")]), device="cpu", ttt_steps=2
    )
    report = ev.run([ev.wiring("train"), ev.wiring("serve")], positions=True)
    in_memory, _ = json_safe(report.to_dict())
    assert len(streamed["wirings"][0]["positions"]) == sum(
        t - 2 - k for t in (37, 50, 64) for k in range(2)
    )
    for a, b in zip(streamed["wirings"], in_memory["wirings"], strict=True):
        assert a["positions"] == b["positions"]
        assert a["steps"] == b["steps"]


def test_per_sample_table_shows_nested_and_markup_names_literally(golden_copy, capsys):
    ckpt, samples = golden_copy
    (samples / "run[").mkdir()
    (samples / "b").mkdir()
    shutil.copy(samples / "data_0.pt", samples / "run[" / "bold].pt")
    shutil.copy(samples / "data_1.pt", samples / "b" / "data_1.pt")
    files = [str(samples / "run[" / "bold].pt"), str(samples / "b" / "data_1.pt")]
    assert main(["eval", str(ckpt), *files, "--per-sample"]) == 0
    out = capsys.readouterr().out
    assert "files under" in out
    assert "│ run[/bold].pt │" in out and "│ b/data_1.pt   │" in out


def test_closed_stdout_ends_quietly(golden_copy):
    ckpt, samples = golden_copy
    code = "import sys; from inspector.cli import main; sys.exit(main(sys.argv[1:]))"
    res = subprocess.run(
        f'"{sys.executable}" -c "{code}" eval "{ckpt}" "{samples}" --json >&-',
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


def test_write_fixed_refuses_an_empty_or_input_out_before_the_diagnosis(golden_copy, capsys):
    import inspector.doctor.pipeline as doctor  # the pipeline the CLI runs

    ckpt, samples = golden_copy
    nested = samples / "part"
    nested.mkdir()
    for f in samples.glob("data_*.pt"):
        f.rename(nested / f.name)
    before = sorted(p.relative_to(samples.parent) for p in samples.parent.rglob("*"))
    diagnose = doctor.diagnose
    doctor.diagnose = lambda *a, **k: pytest.fail("diagnosed before OUT was checked")
    try:
        for out, why in (("", "an empty path"), (str(samples / "fixed"), "outside the input")):
            rc = main(["doctor", str(ckpt), str(samples), "--write-fixed", out])
            (line,) = error_lines(capsys.readouterr().err)
            assert rc == 2 and "--write-fixed" in line and why in line, line
    finally:
        doctor.diagnose = diagnose
    assert sorted(p.relative_to(samples.parent) for p in samples.parent.rglob("*")) == before
