"""The first fifteen minutes: the app without a terminal, help that corrects, and outputs kept out
of the user's way."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_tui_support import settle, synthetic_inputs, until

from inspector.cli import build_parser, main
from inspector.commands.open import build_app

ROOT = Path(__file__).resolve().parents[1]
HEADLESS = ("eval", "accept", "doctor", "reconcile")


# --- the app without a terminal ------------------------------------------------------------------


def _run_cli(argv: list[str], stdin) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "inspector", *argv],
        stdin=stdin,
        capture_output=True,  # stdout a pipe, as `eagle-inspect open | less` or a CI job
        text=True,
        timeout=30,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return out.returncode, out.stdout, out.stderr, time.monotonic() - t0


def _assert_no_terminal_line(rc: int, out: str, err: str, elapsed: float) -> None:
    assert rc == 2, err
    assert out == ""  # no escape codes written into the pipe
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("eagle-inspect: error: ") and "terminal" in line
    assert "--web" in line
    assert all(command in line for command in HEADLESS), line
    assert "\x1b" not in err
    assert elapsed < 2.0, f"took {elapsed:.2f} s"


@pytest.mark.parametrize("argv", [["open"], []], ids=["open", "bare"])
def test_open_without_a_terminal_is_one_line_and_exit_2(argv):
    with open(os.devnull) as devnull:
        _assert_no_terminal_line(*_run_cli(argv, devnull))


def test_open_with_a_terminal_on_stdin_but_stdout_piped():
    leader, follower = pty.openpty()
    try:
        rc, out, err, elapsed = _run_cli(["open", "assets/demo/draft", "nothing"], follower)
    finally:
        os.close(leader)
        os.close(follower)
    _assert_no_terminal_line(rc, out, err, elapsed)
    assert "(stdout is not one)" in err


def test_no_terminal_is_said_before_torch_or_textual_load():
    code = (
        "import sys\n"
        "from inspector.cli import main\n"
        "rc = main(['open'])\n"
        "print(rc, 'torch' in sys.modules, 'textual' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.stdout.split() == ["2", "False", "False"], out.stderr
    assert "--web" in out.stderr


def test_missing_terminal_names_the_stream(monkeypatch):
    from inspector.commands import open as open_cmd

    class Stream:
        def __init__(self, tty: bool) -> None:
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    class Closed:
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    for stdin, stdout, want in (
        (Stream(True), Stream(True), None),
        (Stream(False), Stream(True), "stdin"),
        (Stream(True), Stream(False), "stdout"),
        (Closed(), Stream(True), "stdin"),
        (None, Stream(True), "stdin"),
    ):
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", stdout)
        assert open_cmd.missing_terminal() == want


def test_web_still_serves_without_a_terminal(tmp_path, monkeypatch, capsys):
    import textual_serve.server

    from inspector.commands import open as open_cmd

    assert open_cmd.missing_terminal() is not None  # pytest captures stdin and stdout
    seen = {}

    class FakeServer:
        def __init__(self, command, host, port, title=None):
            seen.update(command=command, port=port)

        def serve(self):
            seen["served"] = True

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    inputs = synthetic_inputs(tmp_path / "in", n_samples=2, seq_len=32)
    argv = ["open", str(inputs.checkpoint), *inputs.samples, "--web", "--out", "ex"]
    assert main(argv) == 0
    assert seen["served"]
    # each tab's app exports where this one was told to, wherever textual-serve starts it
    assert f"--out {Path('ex').absolute()}" in seen["command"]
    assert "terminal" not in capsys.readouterr().err


# --- outputs out of the user's way ---------------------------------------------------------------


async def test_export_goes_to_the_out_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs = synthetic_inputs(tmp_path / "in", n_samples=2, seq_len=40)
    args = build_parser().parse_args(
        ["open", str(inputs.checkpoint), *inputs.samples, "--out", "mine/exports"]
    )
    app = build_app(args)
    assert app.export_dir == "mine/exports"
    app.fill = False
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot, fill=False)
        await pilot.press("e")
        await until(
            pilot,
            lambda: any(m.startswith(("exported", "export failed")) for m in app.main.messages),
        )
        said = [m for m in app.main.messages if m.startswith(("exported", "export failed"))]
        files = list((tmp_path / "mine" / "exports").glob("eagle-inspect-sample*.json"))
        assert len(files) == 1, said
        assert said == [f"exported to mine/exports/{files[0].name}"]
        assert json.loads(files[0].read_text())["format"] == "eagle-inspect-sample-export/1"
    assert (
        not list(tmp_path.glob("eagle-inspect-sample*"))
        and not (tmp_path / "eagle-inspect-exports").exists()
    )


def test_export_default_folder_is_made_on_demand_and_never_an_input(tmp_path, monkeypatch):
    from inspector.errors import InputError
    from inspector.export import DEFAULT_DIR, export_sample, shown_path

    monkeypatch.chdir(tmp_path)
    meta = dict(
        checkpoint="ck", layout="x", slot_labels=[], ttt_steps=1, device="cpu", dtype="float32"
    )
    path = export_sample([], sample_index=3, sample_path="a/data_3.pt", input_paths=[], **meta)
    assert path.parent == tmp_path / DEFAULT_DIR == tmp_path / "eagle-inspect-exports"
    assert path.name == "eagle-inspect-sample0003-data_3.json"
    assert shown_path(path) == "eagle-inspect-exports/eagle-inspect-sample0003-data_3.json"
    assert shown_path("/elsewhere/x.json") == "/elsewhere/x.json"
    # run from inside an input folder: its ./eagle-inspect-exports lies inside it, refused
    inside = tmp_path / "samples"
    inside.mkdir()
    monkeypatch.chdir(inside)
    with pytest.raises(InputError, match="refusing to export into input folder"):
        export_sample([], sample_index=0, sample_path="s.pt", input_paths=[inside], **meta)
    assert not (inside / DEFAULT_DIR).exists()


def test_gitignore_keeps_scratch_folders_out():
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert "eagle-inspect-exports/" in lines
    assert "/cap/" in lines and "/deployed/" in lines


# --- help that corrects ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("llamacpp", "llamacpp"),
        ("llama.cpp", "llamacpp"),
        ("llama-cpp", "llamacpp"),
        ("llama_cpp", "llamacpp"),
        ("LLaMA.cpp", "llamacpp"),
        ("Llama_CPP", "llamacpp"),
        ("vllm", "vllm"),
        ("vLLM", "vllm"),
        ("sglang", "sglang"),
        ("SGLang", "sglang"),
    ],
)
def test_engine_spellings(spelling, canonical):
    from inspector.engines import Engine, parse_engine

    assert parse_engine(spelling, is_chain=True) is Engine(canonical)
    parser = build_parser()
    for argv in (
        ["accept", "--engine", spelling, "ck", "s"],
        ["compare", "a", "b", "s", "--engine", spelling],
        ["sweep", "run", "s", "--engine", spelling],
    ):
        assert parser.parse_args(argv).engine == canonical  # the Engine value, kept internally
    # the doctor keeps the same id (one vocabulary: the registry's)
    doctor = parser.parse_args(["doctor", "ck", "--engine", spelling]).engine
    assert doctor == [canonical]


def test_capture_engine_in_any_case():
    args = build_parser().parse_args(["capture", "t", "i", "--out", "o", "--engine", "SGLang"])
    assert args.engine == "sglang"


def test_unknown_engine_says_did_you_mean():
    from inspector.engines import parse_engine
    from inspector.errors import InputError

    with pytest.raises(InputError) as e:
        parse_engine("vlm", True)
    assert e.value.field == "engine"
    assert e.value.message == "'vlm': one of vllm, sglang, llamacpp; did you mean 'vllm'?"
    with pytest.raises(InputError) as e:
        parse_engine("lama-cp", True)
    assert e.value.message.endswith("did you mean 'llamacpp'?")
    with pytest.raises(InputError) as e:
        parse_engine("trtllm", True)
    assert "did you mean" not in e.value.message  # nothing near: no guess
    with pytest.raises(InputError):  # a spelling of a chain-only engine still refuses a tree
        parse_engine("llama.cpp", False)


def _error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    return err.splitlines()[0]


def test_misspelt_engine_on_the_command_line(capsys):
    line = _error(capsys, ["accept", "ck", "s", "--engine", "sglnag"])
    assert line.startswith("eagle-inspect accept: error: argument --engine: ")
    assert line.endswith("did you mean 'sglang'?")
    line = _error(capsys, ["doctor", "ck", "--engine", "vlm"])
    assert line.endswith("did you mean 'vllm'?")


def test_misspelt_flag_says_did_you_mean(capsys):
    line = _error(capsys, ["accept", "ck", "s", "--stpes", "3"])
    # the subcommand's own error (its triage line follows), naming its nearest flag
    assert line.startswith("eagle-inspect accept: error: unrecognized arguments: --stpes")
    assert line.endswith("did you mean --steps?")
    line = _error(capsys, ["eval", "ck", "s", "--ttt-stpes=2", "--jsno"])
    assert "did you mean --ttt-steps?" in line and "did you mean --json?" in line
    assert _error(capsys, ["--verison"]).endswith("did you mean --version?")
    line = _error(capsys, ["eval", "ck", "s", "--zzzzzz"])  # nothing near: no guess
    assert line.endswith("unrecognized arguments: --zzzzzz")


def test_misspelt_choice_and_command_say_did_you_mean(capsys):
    line = _error(capsys, ["evl", "ck"])
    assert "invalid choice: 'evl'" in line and line.endswith("did you mean 'eval'?")
    line = _error(capsys, ["eval", "ck", "s", "--metrics", "ourz"])
    assert line.endswith("did you mean 'ours'?")
    line = _error(capsys, ["accept", "ck", "s", "--kv", "SGLANG"])
    assert line.endswith("did you mean 'sglang'?")
    line = _error(capsys, ["demo", "bild"])
    assert line.endswith("did you mean 'build'?")
    line = _error(capsys, ["eval", "ck", "s", "--metrics", "qqqq"])
    assert "did you mean" not in line


def test_width_of_another_model_says_how_to_capture(tmp_path):
    import torch

    from inspector.errors import InputError
    from inspector.formats.sample_set import SampleSet

    torch.save(
        {
            "input_ids": torch.arange(5),
            "hidden_states": [torch.randn(5, 6) for _ in range(3)],
            "loss_mask": torch.ones(5, dtype=torch.long),
        },
        tmp_path / "data_0.pt",
    )
    ss = SampleSet(tmp_path, hidden_size=8)
    with pytest.raises(InputError) as e:
        ss[0]
    assert e.value.field == "hidden_states[0]"
    assert e.value.message == (
        "width 6 but the draft's fc expects target_hidden_size 8: samples of another model? "
        "capture them from the draft's target (eagle-inspect capture TARGET PROMPTS --draft CKPT)"
    )
