"""The app in a real terminal: tmux at 120x40, keys sent with send-keys, the screen read back."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_tui_support import demo_available, demo_inputs, synthetic_inputs

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


class Tmux:
    def __init__(self) -> None:
        self.socket = f"eagle-inspect-test-{uuid.uuid4().hex[:8]}"
        self.session = "app"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=20,
        )

    def pane(self) -> str:
        out = self.run("capture-pane", "-p", "-t", self.session, check=False)
        return out.stdout

    def wait_for(self, *needles: str, timeout: float = 60.0) -> str:
        t0 = time.monotonic()
        text = ""
        while time.monotonic() - t0 < timeout:
            text = self.pane()
            if all(n in text for n in needles):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{needles} not on screen:\n{text}")

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.session, check=False).returncode == 0


@pytest.fixture
def tmux():
    t = Tmux()
    yield t
    t.run("kill-server", check=False)


def test_app_in_tmux(tmux, tmp_path):
    if demo_available():
        inputs = demo_inputs()
        argv = [sys.executable, "-m", "inspector"]  # bare command: the demo
    else:
        inputs = synthetic_inputs(tmp_path, n_samples=3, seq_len=64)
        argv = [
            sys.executable,
            "-m",
            "inspector",
            "open",
            str(inputs.checkpoint),
            *inputs.samples,
            "--tokenizer",
            str(inputs.tokenizer),
        ]
    env = f"TERM=xterm-256color PYTHONPATH={shlex.quote(str(ROOT))}"
    # Textual draws on stderr, so stray library output would land on the screen: none may.
    cmd = f"cd {shlex.quote(str(tmp_path))} && env {env} {shlex.join(argv)}"
    tmux.run("new-session", "-d", "-s", tmux.session, "-x", "120", "-y", "40", cmd)
    text = tmux.wait_for("all-tok", "in-vocab", "fc ← ")
    assert "train" in text
    n = len(list(Path(inputs.samples[0]).glob("*.pt")))
    tmux.wait_for(f"all {n} all-tok")
    if demo_available():  # the first look: the trained wiring beside the fed one, their gap
        text = tmux.wait_for("trained", "ref ◆", "Δ ● − ◆", "flipped vs ◆")
    tmux.run("send-keys", "-t", tmux.session, "s")
    # the serve preset, named by its role where the first look found it is what an engine feeds
    text = tmux.wait_for("fc ← ", "all-tok")
    assert "serve" in text or "fed" in text
    # the fed wiring is pinned already where the first look found a gap; else pin serve
    keys = ("t",) if "ref ◆" in text else ("p", "t")
    tmux.run("send-keys", "-t", tmux.session, *keys)
    text = tmux.wait_for("ref ◆", "flipped vs ◆")
    tmux.run("send-keys", "-t", tmux.session, "F8")
    tmux.run("send-keys", "-t", tmux.session, "q")
    t0 = time.monotonic()
    while tmux.alive() and time.monotonic() - t0 < 20:
        time.sleep(0.2)
    assert not tmux.alive()
    for bad in ("Traceback", "Warning", "warn("):
        assert bad not in text, text
